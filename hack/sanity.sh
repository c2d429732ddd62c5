#!/usr/bin/env bash
# ansible-test sanity on the built collection. ansible-test wants the collection
# under .../ansible_collections/<ns>/<name> in a git tree, and bootstraps pip into
# its per-test virtualenvs from a host that is unreachable here; stdlib ensurepip
# does the same job, so we seed its cache with a script that calls it.
#
#   hack/sanity.sh [ansible-test sanity options]      (the .venv's ansible-core)
#   VENV=.venv-ansible-2.21.5 hack/sanity.sh --test ... (another ansible-core: hack/ansible-matrix.sh)
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
# Sanity tests for the virtualenv's Python (a controller Python of its ansible-core: 3.11 for the .venv's 2.19,
# 3.12 or later from 2.20 on; hack/ansible-matrix.sh); skip what needs other interpreters.
python=$("$venv/bin/python" -c 'import sys; print("%d.%d" % sys.version_info[:2])')
"$venv/bin/ansible-test" sanity --python "$python" --color no "$@" 2>&1 | { grep -v "^Running sanity test" || true; }
