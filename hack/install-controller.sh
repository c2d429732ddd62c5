#!/bin/sh
# Install the metalclaim controller from its built artifacts, without Galaxy (only PyPI is needed):
# a virtualenv with the pinned runtime requirements and the controller wheel, then kubernetes.core
# (from PyPI's `ansible` wheel, hack/install-kubernetes-core.py) and the collection tarball into one
# collections path. The Containerfile runs this; so does tests/integration/test_controller_install.py.
#
#   hack/install-controller.sh VENV COLLECTIONS_PATH DIST_DIR REQUIREMENTS_DIR
#
# DIST_DIR holds metalclaim-*.whl and metalclaim-hostclaim-*.tar.gz (make build);
# REQUIREMENTS_DIR holds runtime.txt and constraints.txt. PYTHON picks the interpreter (python3; it needs
# pip >= 22.3). Every PIP_* variable applies (PIP_NO_CACHE_DIR, PIP_FIND_LINKS...).
set -eu
if [ "$#" -ne 4 ]; then
    echo "usage: $0 VENV COLLECTIONS_PATH DIST_DIR REQUIREMENTS_DIR" >&2
    exit 2
fi
venv=$1 collections=$2 dist=$3 requirements=$4
here=$(dirname "$0")

python=${PYTHON:-python3}
# The virtualenv gets no pip of its own (smaller, faster; nothing installs at run time): the installing
# interpreter's pip fills it.
"$python" -m venv --without-pip "$venv"
"$python" -m pip --python "$venv/bin/python" install --quiet --disable-pip-version-check \
    -r "$requirements/runtime.txt" -c "$requirements/constraints.txt"
"$python" -m pip --python "$venv/bin/python" install --quiet --disable-pip-version-check --no-deps \
    "$dist"/metalclaim-*.whl
"$python" "$here/install-kubernetes-core.py" --dest "$collections"
# Only this collections path counts (another copy in ~/.ansible must not make this a no-op); --offline:
# the tarball's one dependency, kubernetes.core, is already there.
ANSIBLE_COLLECTIONS_PATH="$collections" ANSIBLE_COLLECTIONS_SCAN_SYS_PATH=false \
    "$venv/bin/ansible-galaxy" collection install --offline -p "$collections" "$dist"/metalclaim-hostclaim-*.tar.gz
