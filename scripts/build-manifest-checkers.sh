#!/usr/bin/env bash
# Build the Kubernetes manifest checker the chart tests run over the rendered chart (the default
# values and every charts/gpu-auditor/ci/*-values.yaml): kube-score, from its Go module, into
# the cache the control plane uses. Reused when present.
#
#   scripts/build-manifest-checkers.sh            # build what is missing, print the bin folder
#   GPU_AUDITOR_CACHE=/some/dir scripts/...        # cache elsewhere (default ~/.cache/gpu-auditor)
#
# tests/unit/chart/test_chart_kube_score.py runs it; each finding it accepts is listed there
# with the reason.
set -euo pipefail

KUBE_SCORE_VERSION="${KUBE_SCORE_VERSION:-v1.20.0}"
CACHE="${GPU_AUDITOR_CACHE:-$HOME/.cache/gpu-auditor}"
BIN="$CACHE/bin"

say() { printf '[build-manifest-checkers] %s\n' "$*" >&2; }

if ! command -v go >/dev/null 2>&1; then
  say "error: Go is not installed (or not on PATH); kube-score is built from its Go module."
  say "install Go >= 1.23 (https://go.dev/dl/) and run this script again."
  exit 1
fi

export CGO_ENABLED=0 GOFLAGS="${GOFLAGS:--buildvcs=false} -trimpath" GOTOOLCHAIN="${GOTOOLCHAIN:-local}"
mkdir -p "$BIN"

name=kube-score
if [ -x "$BIN/$name-$KUBE_SCORE_VERSION" ]; then
  say "$name $KUBE_SCORE_VERSION: cached"
else
  say "$name $KUBE_SCORE_VERSION: building github.com/zegl/kube-score/cmd/kube-score"
  gobin="$CACHE/src/gobin-$name-$KUBE_SCORE_VERSION"
  rm -rf "$gobin"; mkdir -p "$gobin"
  # kube-score prints main.version for `kube-score version`; stamp it as its release does.
  GOBIN="$gobin" go install -ldflags "-s -w -X main.version=${KUBE_SCORE_VERSION#v}" \
    "github.com/zegl/kube-score/cmd/kube-score@$KUBE_SCORE_VERSION"
  mv "$gobin/$name" "$BIN/$name-$KUBE_SCORE_VERSION"
  rm -rf "$gobin"
fi
ln -sfn "$name-$KUBE_SCORE_VERSION" "$BIN/$name"
echo "$BIN"
