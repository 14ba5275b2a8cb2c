#!/usr/bin/env bash
# Build the real control-plane binaries the integration tests and the demo run as local
# processes: etcd, kube-apiserver, kube-controller-manager, kube-scheduler, kwok and helm.
# Each lands in a cache folder keyed by its version and is reused when present.
#
#   scripts/build-control-plane.sh            # build what is missing, print the bin folder
#   GPU_AUDITOR_CACHE=/some/dir scripts/...    # cache elsewhere (default ~/.cache/gpu-auditor)
set -euo pipefail

KUBE_VERSION="${KUBE_VERSION:-v1.36.3}"
ETCD_VERSION="${ETCD_VERSION:-v3.6.16}"
KWOK_VERSION="${KWOK_VERSION:-v0.8.0}"
HELM_VERSION="${HELM_VERSION:-v3.22.0}"
CACHE="${GPU_AUDITOR_CACHE:-$HOME/.cache/gpu-auditor}"
BIN="$CACHE/bin"

say() { printf '[build-control-plane] %s\n' "$*" >&2; }

if ! command -v go >/dev/null 2>&1; then
  say "error: Go is not installed (or not on PATH). The control plane is built from Go modules;"
  say "install Go >= 1.25 (https://go.dev/dl/) and run this script again."
  exit 1
fi

export CGO_ENABLED=0 GOFLAGS="${GOFLAGS:--buildvcs=false} -trimpath" GOTOOLCHAIN="${GOTOOLCHAIN:-local}"
mkdir -p "$BIN"
WORK="$CACHE/src"
mkdir -p "$WORK"

# have NAME VERSION -> true when $BIN/NAME-VERSION exists and runs
have() { [ -x "$BIN/$1-$2" ]; }

link() { ln -sfn "$1-$2" "$BIN/$1"; }

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

build_kube() {
  local missing=()
  for c in kube-apiserver kube-controller-manager kube-scheduler; do
    if have "$c" "$KUBE_VERSION"; then say "$c $KUBE_VERSION: cached"; link "$c" "$KUBE_VERSION"; else missing+=("$c"); fi
  done
  [ ${#missing[@]} -eq 0 ] && return
  say "${missing[*]} $KUBE_VERSION: building through a wrapper module (k8s.io/kubernetes replaces its staging modules with ./staging paths)"
  local d="$WORK/kubernetes-$KUBE_VERSION" minor staging_version
  minor="$(echo "$KUBE_VERSION" | cut -d. -f2)"
  staging_version="v0.${KUBE_VERSION#v1.}"
  mkdir -p "$d"
  local gomod
  gomod="$(go mod download -json "k8s.io/kubernetes@$KUBE_VERSION" | sed -n 's/^[[:space:]]*"GoMod": "\(.*\)",*$/\1/p')"
  [ -f "$gomod" ] || { say "error: could not download k8s.io/kubernetes@$KUBE_VERSION"; exit 1; }
  {
    echo "module gpu-auditor.local/kubernetes"
    echo
    echo "go $(sed -n 's/^go \([0-9.]*\).*/\1/p' "$gomod" | head -1)"
    echo
    echo "require k8s.io/kubernetes $KUBE_VERSION"
    echo
    # every "k8s.io/x => ./staging/src/k8s.io/x" becomes "k8s.io/x => k8s.io/x v0.X.Y"
    sed -n 's#^[[:space:]]*\(k8s\.io/[^ ]*\) => \./staging/.*#replace \1 => \1 '"$staging_version"'#p' "$gomod"
  } > "$d/go.mod"
  say "wrapper module replaces $(grep -c '^replace' "$d/go.mod") staging modules with $staging_version"
  local ld="-s -w"
  for p in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
    ld="$ld -X $p.gitVersion=$KUBE_VERSION -X $p.gitMajor=1 -X $p.gitMinor=$minor -X $p.gitTreeState=clean -X $p.buildDate=1970-01-01T00:00:00Z"
  done
  local pkgs=()
  for c in "${missing[@]}"; do pkgs+=("k8s.io/kubernetes/cmd/$c"); done
  (cd "$d" && GOFLAGS="$GOFLAGS -mod=mod" go get "${pkgs[@]/%/@$KUBE_VERSION}" \
    && mkdir -p out && GOFLAGS="$GOFLAGS -mod=mod" go build -ldflags "$ld" -o out/ "${pkgs[@]}")
  for c in "${missing[@]}"; do mv "$d/out/$c" "$BIN/$c-$KUBE_VERSION"; link "$c" "$KUBE_VERSION"; done
}

start=$(date +%s)
build_etcd
build_install kwok "$KWOK_VERSION" sigs.k8s.io/kwok/cmd/kwok
# helm's own Makefile stamps its version and the Kubernetes version client-side rendering
# assumes (else "v3.22" and v1.20.0, and charts with kubeVersion >= 1.25 fail `helm template`).
kube_minor="$(echo "$KUBE_VERSION" | cut -d. -f2)"
build_install helm "$HELM_VERSION" helm.sh/helm/v3/cmd/helm "-k1.$kube_minor" \
  "-s -w -X helm.sh/helm/v3/internal/version.version=$HELM_VERSION -X helm.sh/helm/v3/internal/version.gitTreeState=clean -X helm.sh/helm/v3/pkg/chartutil.k8sVersionMajor=1 -X helm.sh/helm/v3/pkg/chartutil.k8sVersionMinor=$kube_minor"
build_kube
say "done in $(( $(date +%s) - start ))s: $BIN"
echo "$BIN"
