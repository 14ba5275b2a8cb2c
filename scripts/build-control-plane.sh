#!/usr/bin/env bash
# Build the real control-plane binaries the integration tests and the demo run as local
# processes: etcd, kube-apiserver, kube-controller-manager, kube-scheduler, kwok and helm, and
# kubectl (tests run the chart NOTES' commands and `kubectl gpu-auditor` with it).
# Each lands in a cache folder keyed by its version and is reused when present.
#
#   scripts/build-control-plane.sh            # build what is missing, print the bin folder
#   GPU_AUDITOR_CACHE=/some/dir scripts/...    # cache elsewhere (default ~/.cache/gpu-auditor)
set -euo pipefail

ETCD_VERSION="${ETCD_VERSION:-v3.6.16}"
KWOK_VERSION="${KWOK_VERSION:-v0.8.0}"
HELM_VERSION="${HELM_VERSION:-v3.22.0}"
SAY_PREFIX=build-control-plane
# shellcheck source=lib/go-build.sh
. "$(dirname "$0")/lib/go-build.sh"
require_go

build_etcd() {
  if have etcd "$ETCD_VERSION"; then say "etcd $ETCD_VERSION: cached"; link etcd "$ETCD_VERSION"; return; fi
  say "etcd $ETCD_VERSION: building (wrapper module; etcd's own go.mod has replace directives)"
  local d="$WORK/etcd-$ETCD_VERSION"
  rm -rf "$d"; mkdir -p "$d"
  (cd "$d" && go mod init gpu-auditor.local/etcd >/dev/null 2>&1 \
    && go get "go.etcd.io/etcd/server/v3@$ETCD_VERSION" \
    && go build -o "$BIN/etcd-$ETCD_VERSION.tmp" go.etcd.io/etcd/server/v3)
  mv "$BIN/etcd-$ETCD_VERSION.tmp" "$BIN/etcd-$ETCD_VERSION"
  link etcd "$ETCD_VERSION"
}

build_install() { # NAME VERSION PACKAGE [CACHE-SUFFIX LDFLAGS]
  local name="$1" version="$2" pkg="$3" suffix="${4:-}" ldflags="${5:-}"
  local key="$version$suffix"
  if have "$name" "$key"; then say "$name $key: cached"; link "$name" "$key"; return; fi
  say "$name $key: building $pkg"
  local gobin="$WORK/gobin-$name-$key"
  rm -rf "$gobin"; mkdir -p "$gobin"
  GOBIN="$gobin" go install -ldflags "$ldflags" "$pkg@$version"
  mv "$gobin/$name" "$BIN/$name-$key"
  link "$name" "$key"
}

start=$(date +%s)
build_etcd
build_install kwok "$KWOK_VERSION" sigs.k8s.io/kwok/cmd/kwok
# helm's own Makefile stamps its version and the Kubernetes version client-side rendering
# assumes (else "v3.22" and v1.20.0, and charts with kubeVersion >= 1.25 fail `helm template`).
kube_minor="$(echo "$KUBE_VERSION" | cut -d. -f2)"
build_install helm "$HELM_VERSION" helm.sh/helm/v3/cmd/helm "-k1.$kube_minor" \
  "-s -w -X helm.sh/helm/v3/internal/version.version=$HELM_VERSION -X helm.sh/helm/v3/internal/version.gitTreeState=clean -X helm.sh/helm/v3/pkg/chartutil.k8sVersionMajor=1 -X helm.sh/helm/v3/pkg/chartutil.k8sVersionMinor=$kube_minor"
build_kube kube-apiserver kube-controller-manager kube-scheduler kubectl
say "done in $(( $(date +%s) - start ))s: $BIN"
echo "$BIN"
