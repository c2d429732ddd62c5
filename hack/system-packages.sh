#!/usr/bin/env bash
# hack/system-packages.sh PROFILE...: the system packages bindep.txt lists for these profiles, installed.
# bindep (in the .venv) says what is missing on this machine. As root with apt-get, they are installed and
# checked again; otherwise the one command that installs them is printed and the exit status is 1.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
bindep=${BINDEP:-$root/.venv/bin/bindep}
(($#)) || { echo "usage: $0 PROFILE..." >&2; exit 2; }

missing() { "$bindep" --brief --file "$root/bindep.txt" "$@" || true; }

mapfile -t packages < <(missing "$@")
((${#packages[@]})) || exit 0
if [[ $(id -u) == 0 ]] && command -v apt-get >/dev/null; then
  echo "system-packages ($*): apt-get install ${packages[*]}" >&2
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${packages[@]}" >/dev/null
  mapfile -t packages < <(missing "$@")
  ((${#packages[@]} == 0)) && exit 0
  echo "system-packages ($*): still missing after apt-get: ${packages[*]}" >&2
  exit 1
fi
{
  echo "system-packages ($*): missing ${packages[*]}. Install them, then run make again:"
  if command -v apt-get >/dev/null; then
    echo "  sudo apt-get install -y --no-install-recommends ${packages[*]}"
  else
    echo "  (with this machine's package manager; bindep.txt names them)"
  fi
} >&2
exit 1
