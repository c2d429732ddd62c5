#!/usr/bin/env bash
# hack/build-base-image.sh: the controller image's base built from Debian packages, for machines that reach
# no container registry (make image passes it to the Containerfile as BASE_IMAGE).
#
# debootstrap (minbase) of the machine's Debian suite with python3 and python3-venv, then a virtualenv at
# /usr/local, so /usr/local/bin/python has pip as in the official python images the Containerfile defaults
# to; imported into podman's store as an OCI image. Cached by its inputs (this script, the mirror, the suite,
# the candidate versions of its packages): the root filesystem's tarball in $METALCLAIM_CACHE/images/,
# the image as localhost/metalclaim-base:<key>. The last stdout line is the image's reference.
# Root only (debootstrap, chroot). Progress goes to stderr.
set -euo pipefail

CACHE_DIR=${METALCLAIM_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/metalclaim}
PACKAGES=python3,python3-venv
started=$(date +%s)
log() { printf '[build-base-image] %4ss %s\n' "$(($(date +%s) - started))" "$*" >&2; }
die() { log "error: $*"; exit 1; }

[[ $(id -u) == 0 ]] || die "run as root (debootstrap and chroot need it)"
for tool in debootstrap podman apt-get apt-cache; do
  command -v "$tool" >/dev/null || die "$tool is missing (make image installs bindep.txt's node profile)"
done

# The machine's apt configuration names the mirror and suite (as files/metalclaim-build-deploy-iso does).
read -r MIRROR SUITE < <(apt-get indextargets --format '$(REPO_URI) $(CODENAME) $(LABEL) $(COMPONENT)' \
  'Created-By: Packages' | awk '$3 == "Debian" && $4 == "main" {print $1, $2; exit}') ||
  die "no Debian main archive in the apt configuration (apt-get indextargets)"
versions=$(for p in ${PACKAGES//,/ }; do apt-cache policy "$p" | awk -v p="$p" '/Candidate:/ {print p "=" $2}'; done)
key=$({
  sha256sum "$0" | awk '{print $1}'
  echo "$MIRROR $SUITE $versions"
} | sha256sum | cut -c1-16)
REF=localhost/metalclaim-base:$SUITE-$key
TARBALL=$CACHE_DIR/images/base-$SUITE-$key.tar

if podman image exists "$REF"; then
  log "cached: $REF"
  echo "$REF"
  exit 0
fi
mkdir -p "$CACHE_DIR/images"
if [[ ! -s $TARBALL ]]; then
  WORK=$(mktemp -d "$CACHE_DIR/images/.base-build.XXXXXX")
  cleanup() {
    for mount in proc sys dev/pts dev; do umount -l "$WORK/rootfs/$mount" 2>/dev/null || true; done
    rm -rf "$WORK"
  }
  trap cleanup EXIT
  ROOT=$WORK/rootfs
  log "debootstrap $SUITE (minbase + $PACKAGES) from $MIRROR; about a minute"
  debootstrap --variant=minbase --include="$PACKAGES" "$SUITE" "$ROOT" "$MIRROR" >"$WORK/debootstrap.log" 2>&1 || {
    tail -20 "$WORK/debootstrap.log" >&2
    die "debootstrap failed"
  }
  log "a virtualenv at /usr/local (pip from python3-venv's wheel)"
  chroot "$ROOT" /usr/bin/python3 -m venv /usr/local
  chroot "$ROOT" /usr/local/bin/python -m pip --version >&2
  # What an image never uses: apt's caches and lists, documentation, locales but C's.
  rm -rf "$ROOT"/var/cache/apt/* "$ROOT"/var/lib/apt/lists/* "$ROOT"/var/log/* "$ROOT"/usr/share/doc/* \
    "$ROOT"/usr/share/man/* "$ROOT"/usr/share/info/* "$ROOT"/tmp/* "$ROOT"/root/.cache
  find "$ROOT/usr/share/locale" -mindepth 1 -maxdepth 1 ! -name 'locale.alias' -exec rm -rf {} +
  find "$ROOT" -name __pycache__ -type d -prune -exec rm -rf {} +
  : >"$ROOT/etc/machine-id"
  tar --numeric-owner --xattrs -C "$ROOT" -cf "$TARBALL.tmp" .
  mv "$TARBALL.tmp" "$TARBALL"
  log "root filesystem: $TARBALL ($(du -h "$TARBALL" | cut -f1))"
fi
log "podman import as $REF"
podman import --quiet \
  --change 'ENV PATH=/usr/local/bin:/usr/local/sbin:/usr/sbin:/usr/bin:/sbin:/bin' \
  --change 'ENV LANG=C.UTF-8' \
  --change 'CMD ["/usr/local/bin/python"]' \
  "$TARBALL" "$REF" >/dev/null
log "done"
echo "$REF"
