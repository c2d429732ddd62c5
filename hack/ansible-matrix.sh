#!/usr/bin/env bash
# The collection on the other ansible-core releases of its supported range (meta/runtime.yml;
# the .venv has the newest): for each exact VERSION, a small virtualenv .venv-ansible-VERSION
# (that ansible-core, the collection's requirements.txt and pytest; made once, remade when a
# requirements file changes), then the collection's unit tests and the sanity tests whose
# outcome depends on ansible-core (docs, argument specs, imports, runtime.yml) on the built
# tarball (make build), with tests/sanity/ignore-X.Y.txt.
#
#   hack/ansible-matrix.sh 2.17.14 2.18.19
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
# What ansible-core itself decides; pep8, pylint, yamllint and the rest run on the newest only.
tests=(--test ansible-doc --test validate-modules --test import --test runtime-metadata --test compile --test action-plugin-docs)
for version in "$@"; do
  venv=.venv-ansible-$version
  digest=$(cat requirements.txt requirements/constraints.txt "$0" | sha256sum | cut -c1-16)
  if [[ ! -f $venv/.installed-$digest ]]; then
    rm -rf "$venv"
    python3 -m venv --without-pip "$venv"
    # The project's pins, less the two ansible-core releases disagree on.
    grep -v -E '^(ansible-core|resolvelib)==' requirements/constraints.txt >"$venv/constraints.txt"
    .venv/bin/python -m pip --python "$venv/bin/python" install --quiet --disable-pip-version-check \
      "ansible-core==$version" -r requirements.txt pytest pytest-timeout jsonschema PyYAML -c "$venv/constraints.txt"
    touch "$venv/.installed-$digest"
  fi
  got=$("$venv/bin/python" -c 'from ansible.release import __version__; print(__version__)')
  [[ $got == "$version" ]] || { echo "matrix: $venv has ansible-core $got, not $version" >&2; exit 1; }
  echo "== ansible-core $version: unit tests (tests/unit/plugins)"
  # (test_media.py serves through metalclaim.mediaserver, from the checkout.)
  PYTHONPATH=controller "$venv/bin/python" -m pytest tests/unit/plugins -q -p no:cacheprovider
  echo "== ansible-core $version: sanity (${tests[*]})"
  VENV=$venv bash hack/sanity.sh "${tests[@]}"
done
