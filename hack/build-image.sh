#!/usr/bin/env bash
# hack/build-image.sh REF: build the controller image (the Containerfile) here, with podman and no registry.
#
# The base is BASE_IMAGE when set (e.g. docker.io/library/python:3.11-slim, the Containerfile's default),
# else debootstrapped from Debian packages (hack/build-base-image.sh, cached). The build context holds
# only what the Containerfile copies (make build's tarball and wheel, the install scripts, requirements).
# Podman runs the build's steps on the host's network and with explicit nofile/nproc limits: without
# CAP_SYS_RESOURCE (as here) runc cannot set podman's defaults ("error setting rlimit type 6/7: operation
# not permitted"). This machine's pip configuration (its config files and PIP_INDEX_URL, PIP_CERT... as
# one pip.conf) and CA file are mounted into the build's steps, never copied into the image: a mirror or
# a TLS-inspecting proxy works as it does for make setup. Prints the build time and size.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
ref=${1:?usage: $0 REF}
started=$(date +%s)
log() { printf '[build-image] %4ss %s\n' "$(($(date +%s) - started))" "$*" >&2; }

shopt -s nullglob
dist=("$root"/build/metalclaim-hostclaim-*.tar.gz "$root"/build/metalclaim-*.whl)
((${#dist[@]} == 2)) || { log "error: build/ needs one collection tarball and one wheel (make build)"; exit 1; }
base=${BASE_IMAGE:-$(bash "$root/hack/build-base-image.sh" | tail -1)}

context=$(mktemp -d)
trap 'rm -rf "$context"' EXIT
mkdir -p "$context/requirements" "$context/hack" "$context/build"
cp "$root/Containerfile" "$context/"
cp "$root/requirements/runtime.txt" "$root/requirements/constraints.txt" "$context/requirements/"
cp "$root/hack/install-controller.sh" "$root/hack/install-kubernetes-core.py" "$context/hack/"
cp "${dist[@]}" "$context/build/"

nofile=$(ulimit -Hn) nproc=$(ulimit -Hu)
[[ $nofile == unlimited || $nofile -gt 65536 ]] && nofile=65536
[[ $nproc == unlimited || $nproc -gt 32768 ]] && nproc=32768
# The pip configuration in effect here, as one file: config files, then PIP_* variables.
mkdir "$context/.pip"
cert=$(python3 - "$context/.pip/pip.conf" <<'PY'
import configparser, os, sys
from pathlib import Path
config = configparser.ConfigParser()
config.read(["/etc/xdg/pip/pip.conf", "/etc/pip.conf", str(Path.home() / ".config/pip/pip.conf")])
if not config.has_section("global"):
    config.add_section("global")
for option in ("index-url", "extra-index-url", "trusted-host", "cert", "timeout", "retries"):
    value = os.environ.get("PIP_" + option.upper().replace("-", "_"))
    if value:
        config.set("global", option, value)
with open(sys.argv[1], "w") as handle:
    config.write(handle)
print(config.get("global", "cert", fallback=""))
PY
)
mounts=(--volume "$context/.pip/pip.conf:/etc/pip.conf:ro")
[[ -z $cert || ! -r $cert ]] || mounts+=(--volume "$(readlink -f "$cert"):$cert:ro")

log "podman build $ref from $base"
podman build --quiet --network=host --ulimit "nofile=$nofile:$nofile" --ulimit "nproc=$nproc:$nproc" "${mounts[@]}" \
  --build-arg "BASE_IMAGE=$base" -t "$ref" -f "$context/Containerfile" "$context" >/dev/null
size=$(podman image inspect --format '{{.Size}}' "$ref")
log "built $ref: $((size / 1000000)) MB in $(($(date +%s) - started)) s"
echo "$ref"
