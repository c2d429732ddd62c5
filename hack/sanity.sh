#!/usr/bin/env bash
# ansible-test sanity on the built collection. ansible-test wants the collection
# under .../ansible_collections/<ns>/<name> in a git tree, and bootstraps pip into
# its per-test virtualenvs from a host that is unreachable here; stdlib ensurepip
# does the same job, so we seed its cache with a script that calls it.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
tarball=$(ls "$root"/build/metalclaim-hostclaim-*.tar.gz)
work=$root/build/sanity
rm -rf "$work" && mkdir -p "$work/ansible_collections/metalclaim/hostclaim"
tar -xzf "$tarball" -C "$work/ansible_collections/metalclaim/hostclaim"
cache=${HOME}/.ansible/test/cache
mkdir -p "$cache"
for version in 24.2 25.0 25.1; do
  printf 'import ensurepip\nensurepip.bootstrap(upgrade=True)\n' >"$cache/get_pip_${version//./_}.py"
done
cd "$work/ansible_collections/metalclaim/hostclaim"
git init -q && git add -A
# Sanity tests for the Python versions this machine has; skip what needs other interpreters.
"$root/.venv/bin/ansible-test" sanity --python 3.11 --color no "$@" 2>&1 | { grep -v "^Running sanity test" || true; }
