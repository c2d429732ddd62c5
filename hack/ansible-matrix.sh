#!/usr/bin/env bash
# The collection on the other ansible-core releases of its supported range (meta/runtime.yml;
# the .venv has 2.19): for each exact VERSION, a small virtualenv .venv-ansible-VERSION on a
# Python that release's controller supports (python_for below; made once, remade when a
# requirements file or the interpreter changes) holding that ansible-core, the collection's
# requirements.txt and pytest, then the collection's unit tests and the sanity tests whose
# outcome depends on ansible-core (docs, argument specs, imports, runtime.yml) on the built
# tarball (make build), with tests/sanity/ignore-X.Y.txt.
#
#   hack/ansible-matrix.sh 2.17.14 2.18.19 2.20.10 2.21.5
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
# What ansible-core itself decides; pep8, pylint, yamllint and the rest run on the newest only.
tests=(--test ansible-doc --test validate-modules --test import --test runtime-metadata --test compile --test action-plugin-docs)

# The Python of a release's virtualenv: one its controller runs on (2.17: 3.10 to 3.12; 2.18, 2.19: 3.11 to 3.13;
# 2.20, 2.21: 3.12 to 3.14), 3.11 (the .venv's) while a release takes it, and the newer ones spread over the rest.
python_for() {
  case $1 in
    2.17.* | 2.18.* | 2.19.*) echo 3.11 ;;
    2.20.*) echo 3.12 ;;
    *) echo 3.13 ;;
  esac
}

# A pythonX.Y that runs (a pyenv shim on PATH may not: it fails for a version `pyenv global` does not name), from
# PATH, else from pyenv's versions ($PYENV_ROOT or `pyenv root`), newest patch first; else exit, naming what is missing.
find_python() {
  local want=$1 release=$2 candidate
  local pyenv_root=${PYENV_ROOT:-$(pyenv root 2>/dev/null || true)}
  local candidates=("$(command -v "python$want" || true)")
  if [[ -n $pyenv_root ]]; then
    candidates+=($(ls -d "$pyenv_root"/versions/"$want".*/bin/"python$want" 2>/dev/null | sort -rV))
  fi
  for candidate in "${candidates[@]}"; do
    if [[ -n $candidate ]] && [[ $("$candidate" -c 'import sys, venv; print("%d.%d" % sys.version_info[:2])' \
      2>/dev/null) == "$want" ]]; then
      echo "$candidate"
      return
    fi
  done
  echo "matrix: ansible-core $release needs Python $want: no working python$want on PATH${pyenv_root:+ or under $pyenv_root/versions/} (install Python $want, e.g. pyenv install $want, or drop $release from ANSIBLE_MATRIX)" >&2
  exit 1
}

for version in "$@"; do
  venv=.venv-ansible-$version
  python=$(find_python "$(python_for "$version")" "$version")
  digest=$( (cat requirements.txt requirements/constraints.txt "$0" && "$python" -VV) | sha256sum | cut -c1-16)
  if [[ ! -f $venv/.installed-$digest ]]; then
    rm -rf "$venv"
    "$python" -m venv --without-pip "$venv"
    # The project's pins, less the two ansible-core releases disagree on.
    grep -v -E '^(ansible-core|resolvelib)==' requirements/constraints.txt >"$venv/constraints.txt"
    .venv/bin/python -m pip --python "$venv/bin/python" install --quiet --disable-pip-version-check \
      "ansible-core==$version" -r requirements.txt pytest pytest-timeout jsonschema PyYAML -c "$venv/constraints.txt"
    touch "$venv/.installed-$digest"
  fi
  got=$("$venv/bin/python" -c 'import sys; from ansible.release import __version__; print(__version__, "%d.%d" % sys.version_info[:2])')
  [[ $got == "$version $(python_for "$version")" ]] || {
    echo "matrix: $venv has ansible-core and Python $got, not $version $(python_for "$version")" >&2
    exit 1
  }
  echo "== ansible-core $version (Python $(python_for "$version")): unit tests (tests/unit/plugins)"
  # (test_media.py serves through metalclaim.mediaserver, from the checkout.)
  PYTHONPATH=controller "$venv/bin/python" -m pytest tests/unit/plugins -q -p no:cacheprovider
  echo "== ansible-core $version: sanity (${tests[*]})"
  VENV=$venv bash hack/sanity.sh "${tests[@]}"
done
