#!/usr/bin/env bash
# ansible-test sanity on the built collection. ansible-test wants the collection
# under .../ansible_collections/<ns>/<name> in a git tree, and bootstraps pip into
# its per-test virtualenvs from a host that is unreachable here; stdlib ensurepip
# does the same job, so we seed its cache with a script that calls it.
#
#   hack/sanity.sh [ansible-test sanity options]      (the .venv's ansible-core)
#   VENV=.venv-ansible-2.17 hack/sanity.sh --test ... (another ansible-core: hack/ansible-matrix.sh)
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
venv=$(cd "$root/${VENV:-.venv}" && pwd)
tarball=$(ls "$root"/build/metalclaim-hostclaim-*.tar.gz)
work=$root/build/sanity${VENV:+-$(basename "$venv")}
rm -rf "$work" && mkdir -p "$work/ansible_collections/metalclaim/hostclaim"
tar -xzf "$tarball" -C "$work/ansible_collections/metalclaim/hostclaim"
cache=${HOME}/.ansible/test/cache
mkdir -p "$cache"
# The pip version this ansible-test bootstraps into its virtualenvs (each release pins one).
versions=$("$venv/bin/python" - <<'PY'
import re
from pathlib import Path
import ansible_test
source = (Path(ansible_test.__file__).parent / "_internal" / "python_requirements.py").read_text()
print(" ".join(sorted(set(re.findall(r"pip='([0-9.]+)'", source)))))
PY
)
for version in $versions; do
  printf 'import ensurepip\nensurepip.bootstrap(upgrade=True)\n' >"$cache/get_pip_${version//./_}.py"
done
cd "$work/ansible_collections/metalclaim/hostclaim"
git init -q && git add -A
# Sanity tests for the Python versions this machine has; skip what needs other interpreters.
"$venv/bin/ansible-test" sanity --python 3.11 --color no "$@" 2>&1 | { grep -v "^Running sanity test" || true; }
