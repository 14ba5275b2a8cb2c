#!/usr/bin/env bash
# Build Grafana's dashboard-linter, which tests/unit/chart/test_dashboard_lint.py runs over the
# chart's dashboard, from its Go module at a pinned commit, into the cache the other tools use.
# Reused when present.
#
#   scripts/build-dashboard-linter.sh                        # from the module proxy
#   DASHBOARD_LINTER_SRC=/path/to/checkout scripts/...       # from a checkout of that commit
#   GPU_AUDITOR_CACHE=/some/dir scripts/...                  # cache elsewhere
#
# The commit is the last before dashboard-linter started to need Grafana's apps/dashboard module
# (v2 dashboard schema, 2026-06-18), a pseudo-version some module proxies do not serve; the
# module has no release newer than v0.1.1 (2022).
set -euo pipefail

COMMIT="${DASHBOARD_LINTER_COMMIT:-6d38b915eed828c3164124eaf3b3ab6481f01e78}"
CACHE="${GPU_AUDITOR_CACHE:-$HOME/.cache/gpu-auditor}"
BIN="$CACHE/bin"
KEY="${COMMIT:0:12}"
say() { printf '[build-dashboard-linter] %s\n' "$*" >&2; }

if ! command -v go >/dev/null 2>&1; then
  say "error: Go is not installed (or not on PATH); dashboard-linter is built from its Go module."
  exit 1
fi
export CGO_ENABLED=0 GOFLAGS="${GOFLAGS:--buildvcs=false} -trimpath" GOTOOLCHAIN="${GOTOOLCHAIN:-local}"
mkdir -p "$BIN"

if [ -x "$BIN/dashboard-linter-$KEY" ]; then
  say "dashboard-linter $KEY: cached"
elif [ -n "${DASHBOARD_LINTER_SRC:-}" ]; then
  say "dashboard-linter $KEY: building the checkout $DASHBOARD_LINTER_SRC"
  (cd "$DASHBOARD_LINTER_SRC" && go build -ldflags "-s -w" -o "$BIN/dashboard-linter-$KEY.tmp" .)
  mv "$BIN/dashboard-linter-$KEY.tmp" "$BIN/dashboard-linter-$KEY"
else
  say "dashboard-linter $KEY: building github.com/grafana/dashboard-linter@$COMMIT"
  gobin="$CACHE/src/gobin-dashboard-linter-$KEY"
  rm -rf "$gobin"; mkdir -p "$gobin"
  GOBIN="$gobin" go install -ldflags "-s -w" "github.com/grafana/dashboard-linter@$COMMIT"
  mv "$gobin/dashboard-linter" "$BIN/dashboard-linter-$KEY"
  rm -rf "$gobin"
fi
ln -sfn "dashboard-linter-$KEY" "$BIN/dashboard-linter"
echo "$BIN"
