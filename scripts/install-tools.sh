#!/usr/bin/env bash
# Install the non-Python tools the tests use when they are missing: promtool and prometheus
# (Debian's `prometheus` package) for alert-rule unit tests and the real-scrape test.
set -euo pipefail
if command -v promtool >/dev/null 2>&1 && command -v prometheus >/dev/null 2>&1; then
  echo "[install-tools] promtool and prometheus present" >&2
  exit 0
fi
SUDO=""
[ "$(id -u)" -eq 0 ] || SUDO="sudo"
echo "[install-tools] installing Debian's prometheus package (promtool, prometheus)" >&2
$SUDO apt-get update -qq
DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends prometheus >/dev/null
# The package starts a system service where systemd runs; the tests start their own.
$SUDO systemctl disable --now prometheus >/dev/null 2>&1 || true
command -v promtool >/dev/null
