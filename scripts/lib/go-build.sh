# Shared by scripts/build-control-plane.sh and scripts/build-node.sh (sourced, not run):
# a cache folder of binaries keyed by version, and the wrapper module that builds commands of
# k8s.io/kubernetes (whose go.mod replaces its staging modules with ./staging paths).
#
# The caller sets SAY_PREFIX and may set KUBE_VERSION / GPU_AUDITOR_CACHE before sourcing.

KUBE_VERSION="${KUBE_VERSION:-v1.36.3}"
CACHE="${GPU_AUDITOR_CACHE:-$HOME/.cache/gpu-auditor}"
BIN="$CACHE/bin"
WORK="$CACHE/src"

say() { printf '[%s] %s\n' "${SAY_PREFIX:-build}" "$*" >&2; }

require_go() {
  if ! command -v go >/dev/null 2>&1; then
    say "error: Go is not installed (or not on PATH). These binaries are built from Go modules;"
    say "install Go >= 1.25 (https://go.dev/dl/) and run this script again."
    exit 1
  fi
  export CGO_ENABLED=0 GOFLAGS="${GOFLAGS:--buildvcs=false} -trimpath" GOTOOLCHAIN="${GOTOOLCHAIN:-local}"
  mkdir -p "$BIN" "$WORK"
}

# have NAME VERSION -> true when $BIN/NAME-VERSION exists and is executable
have() { [ -x "$BIN/$1-$2" ]; }

# link NAME VERSION -> $BIN/NAME points at the version in use
link() { ln -sfn "$1-$2" "$BIN/$1"; }

# build_kube COMMAND... -> each k8s.io/kubernetes/cmd/COMMAND at $KUBE_VERSION, version-stamped
build_kube() {
  local missing=()
  for c in "$@"; do
    if have "$c" "$KUBE_VERSION"; then say "$c $KUBE_VERSION: cached"; link "$c" "$KUBE_VERSION"; else missing+=("$c"); fi
  done
  [ ${#missing[@]} -eq 0 ] && return
  say "${missing[*]} $KUBE_VERSION: building through a wrapper module (k8s.io/kubernetes replaces its staging modules with ./staging paths)"
  local d="$WORK/kubernetes-$KUBE_VERSION" minor staging_version
  minor="$(echo "$KUBE_VERSION" | cut -d. -f2)"
  staging_version="v0.${KUBE_VERSION#v1.}"
  mkdir -p "$d"
  if [ ! -f "$d/go.mod" ]; then
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
  fi
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
