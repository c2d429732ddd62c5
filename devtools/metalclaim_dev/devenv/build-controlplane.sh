#!/usr/bin/env bash
# Build kube-apiserver, kube-controller-manager, kubectl and etcd from Go modules
# with the machine's Go toolchain, cached by version outside the repository.
# --node: also kubelet and kube-scheduler (the devenv's node, metalclaim_dev.devenv.node), the same way.
# --capi: also Cluster API's core manager (sigs.k8s.io/cluster-api/core, metalclaim_dev.devenv.capi) and the
#   manifests the devenv applies (CRD bases, webhook manifests, RBAC) copied from the module.
#
# k8s.io/kubernetes cannot be `go install`ed: its go.mod replaces every k8s.io/*
# staging module with a local path. We build it from a throwaway module that
# requires it and pins each of those staging modules to the matching v0.MINOR.PATCH
# tag, deriving the list from the upstream go.mod served by the module proxy.
set -euo pipefail

K8S_VERSION=${K8S_VERSION:-v1.36.3}
ETCD_VERSION=${ETCD_VERSION:-v3.6.16}
CACHE_DIR=${METALCLAIM_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/metalclaim}
K8S_BIN=$CACHE_DIR/kubernetes-$K8S_VERSION
NODE_BIN=$CACHE_DIR/kubernetes-node-$K8S_VERSION
ETCD_BIN=$CACHE_DIR/etcd-$ETCD_VERSION
CAPI_VERSION=${CAPI_VERSION:-v1.14.2}
CAPI_DIR=$CACHE_DIR/cluster-api-$CAPI_VERSION

log() { printf '[build-controlplane] %s\n' "$*" >&2; }

staging_version=v0.${K8S_VERSION#v1.}
ldflags_k8s="-s -w"
for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
  minor=${K8S_VERSION#v1.}; minor=${minor%%.*}
  ldflags_k8s+=" -X $pkg.gitVersion=$K8S_VERSION -X $pkg.gitMajor=1 -X $pkg.gitMinor=$minor"
  ldflags_k8s+=" -X $pkg.gitTreeState=clean -X $pkg.buildDate=1970-01-01T00:00:00Z"
done

# build_from_module MODULE VERSION PIN OUT_DIR PACKAGE...
# Builds PACKAGEs of MODULE@VERSION from a throwaway main module. Every replace
# of MODULE's go.mod that points at a local directory (staging or sibling module)
# becomes a pin of that module at version PIN, so the build matches upstream's.
build_from_module() {
  local module=$1 version=$2 pin=$3 out=$4; shift 4
  local work; work=$(mktemp -d)
  local modfile
  modfile=$(cd "$work" && go mod download -json "$module@$version" | python3 -c 'import json,sys; print(json.load(sys.stdin)["GoMod"])')
  local -a local_replaces
  mapfile -t local_replaces < <(awk '
    /^replace \(/ {block=1; next}
    block && /^\)/ {block=0; next}
    block && $2=="=>" && $3 ~ /^\.\.?\// && $3 !~ /FORBIDDEN/ {print $1}
    !block && $1=="replace" && $3=="=>" && $4 ~ /^\.\.?\// && $4 !~ /FORBIDDEN/ {print $2}
  ' "$modfile")
  log "$module $version: pinning ${#local_replaces[@]} locally replaced modules at $pin"
  {
    echo "module metalclaim.local/build"
    echo
    grep -m1 '^go ' "$modfile"
    echo
    echo "require $module $version"
    if ((${#local_replaces[@]})); then
      echo
      echo "replace ("
      for m in "${local_replaces[@]}"; do printf '\t%s => %s %s\n' "$m" "$m" "$pin"; done
      echo ")"
    fi
  } >"$work/go.mod"
  {
    echo "//go:build tools"
    echo
    echo "package tools"
    echo
    for p in "$@"; do echo "import _ \"$p\""; done
  } >"$work/tools.go"
  (cd "$work" && GOFLAGS=-mod=mod go mod tidy >/dev/null 2>"$work/tidy.log") || { cat "$work/tidy.log" >&2; rm -rf "$work"; exit 1; }
  log "$module $version: go build $* (the slow part on a cold cache)"
  rm -rf "$out.tmp"; mkdir -p "$out.tmp"
  (cd "$work" && CGO_ENABLED=0 go build -trimpath -ldflags "$LDFLAGS" -o "$out.tmp/" "$@")
  rm -rf "$out" "$work"; mv "$out.tmp" "$out"
}

build_etcd() {
  if [[ -x $ETCD_BIN/etcd ]]; then log "etcd $ETCD_VERSION: cached in $ETCD_BIN"; return; fi
  LDFLAGS="-s -w" build_from_module go.etcd.io/etcd/server/v3 "$ETCD_VERSION" "$ETCD_VERSION" "$ETCD_BIN" go.etcd.io/etcd/server/v3
  mv "$ETCD_BIN/server" "$ETCD_BIN/etcd"  # go names the binary after the path element before /v3
}

build_kubernetes() {
  if [[ -x $K8S_BIN/kube-apiserver && -x $K8S_BIN/kube-controller-manager && -x $K8S_BIN/kubectl ]]; then
    log "kubernetes $K8S_VERSION: cached in $K8S_BIN"; return
  fi
  LDFLAGS="$ldflags_k8s" build_from_module k8s.io/kubernetes "$K8S_VERSION" "$staging_version" "$K8S_BIN" \
    k8s.io/kubernetes/cmd/kube-apiserver k8s.io/kubernetes/cmd/kube-controller-manager k8s.io/kubernetes/cmd/kubectl
}

build_node() {
  if [[ -x $NODE_BIN/kubelet && -x $NODE_BIN/kube-scheduler ]]; then
    log "kubelet, kube-scheduler $K8S_VERSION: cached in $NODE_BIN"; return
  fi
  LDFLAGS="$ldflags_k8s" build_from_module k8s.io/kubernetes "$K8S_VERSION" "$staging_version" "$NODE_BIN" \
    k8s.io/kubernetes/cmd/kubelet k8s.io/kubernetes/cmd/kube-scheduler
}

# The manager and, beside it, the module's manifests: config/ is not part of the build, so it is copied from the
# same module version (read-only in the module cache, hence chmod) into the cache directory.
build_capi() {
  if [[ -x $CAPI_DIR/cluster-api-manager && -d $CAPI_DIR/config/crd && -f $CAPI_DIR/config/webhook/manifests.yaml ]]; then
    log "cluster-api $CAPI_VERSION: cached in $CAPI_DIR"; return
  fi
  local out=$CAPI_DIR.build
  local pkg=sigs.k8s.io/cluster-api/version
  local ldflags="-s -w -X $pkg.gitVersion=$CAPI_VERSION -X $pkg.gitTreeState=clean -X $pkg.buildDate=1970-01-01T00:00:00Z"
  # core/go.mod's `replace sigs.k8s.io/cluster-api/api => ./api` becomes a pin at the same version.
  LDFLAGS="$ldflags" build_from_module sigs.k8s.io/cluster-api "$CAPI_VERSION" "$CAPI_VERSION" "$out" \
    sigs.k8s.io/cluster-api/core
  mv "$out/core" "$out/cluster-api-manager"
  local src
  src=$(go mod download -json "sigs.k8s.io/cluster-api@$CAPI_VERSION" | python3 -c 'import json,sys; print(json.load(sys.stdin)["Dir"])')
  mkdir -p "$out/config/crd" "$out/config/webhook" "$out/config/rbac"
  cp "$src"/core/config/crd/bases/*.yaml "$out/config/crd/"
  cp "$src"/core/config/webhook/manifests.yaml "$out/config/webhook/"
  cp "$src"/core/config/rbac/{role,aggregated_role}.yaml "$out/config/rbac/"
  chmod -R u+w "$out/config"
  rm -rf "$CAPI_DIR"; mv "$out" "$CAPI_DIR"
}

mkdir -p "$CACHE_DIR"
start=$(date +%s)
build_etcd
build_kubernetes
node_json= capi_json=
for arg in "$@"; do
  case $arg in
    --node)
      build_node
      node_json=", \"node_bin\": \"$NODE_BIN\""
      ;;
    --capi)
      build_capi
      capi_json=", \"cluster_api\": \"$CAPI_VERSION\", \"capi_dir\": \"$CAPI_DIR\""
      capi_json+=", \"capi_manager\": \"$CAPI_DIR/cluster-api-manager\""
      ;;
    *) log "unknown option $arg (expected --node, --capi)"; exit 2 ;;
  esac
done
log "done in $(( $(date +%s) - start ))s"
printf '{"kubernetes": "%s", "etcd": "%s", "kube_bin": "%s", "etcd_bin": "%s"%s%s}\n' \
  "$K8S_VERSION" "$ETCD_VERSION" "$K8S_BIN" "$ETCD_BIN/etcd" "$node_json" "$capi_json"
