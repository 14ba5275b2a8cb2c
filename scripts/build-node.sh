#!/usr/bin/env bash
# Build what a real node beside the local control plane needs (tests/e2e), cached like the
# control plane in ~/.cache/gpu-auditor/bin, each keyed by its version and reused when present:
#   kubelet, kube-proxy   the same k8s.io/kubernetes module and version as kube-apiserver
#   containerd, ctr, containerd-shim-runc-v2   from the containerd Go module (Debian's 1.6 is
#                         too old for kubelet 1.36, which needs containerd 2.x)
#   coredns               CoreDNS with only the plugins a test cluster needs (kubernetes, cache,
#                         errors, health, ready): the Service names `helm test` resolves
#   pause                 the sandbox process, compiled from the kubernetes module's pause.c,
#                         and its image as an OCI archive (no registry is reachable)
# and installs Debian's runc, CNI plugins (bridge, host-local, loopback) and iptables.
#
#   scripts/build-node.sh      # build what is missing, print the bin folder
set -euo pipefail

CONTAINERD_VERSION="${CONTAINERD_VERSION:-v2.3.7}"
COREDNS_VERSION="${COREDNS_VERSION:-v1.14.7}"
PAUSE_VERSION="${PAUSE_VERSION:-3.10.2}"   # build/pause/Makefile's TAG in k8s.io/kubernetes v1.36
SAY_PREFIX=build-node
here="$(cd "$(dirname "$0")" && pwd)"
# shellcheck source=lib/go-build.sh
. "$here/lib/go-build.sh"
# shellcheck source=lib/debian-tools.sh
. "$here/lib/debian-tools.sh"
require_go
IMAGES="$CACHE/images"
mkdir -p "$IMAGES"

build_containerd() {
  local dir="$BIN/containerd-$CONTAINERD_VERSION"
  if [ -x "$dir/containerd" ] && [ -x "$dir/ctr" ] && [ -x "$dir/containerd-shim-runc-v2" ]; then
    say "containerd $CONTAINERD_VERSION: cached"
  else
    say "containerd $CONTAINERD_VERSION: building containerd, ctr, containerd-shim-runc-v2"
    local d="$WORK/containerd-$CONTAINERD_VERSION" m=github.com/containerd/containerd/v2
    rm -rf "$d" "$dir.tmp"; mkdir -p "$d" "$dir.tmp"
    (cd "$d" && go mod init gpu-auditor.local/containerd >/dev/null 2>&1 \
      && go get "$m/cmd/containerd@$CONTAINERD_VERSION" "$m/cmd/ctr@$CONTAINERD_VERSION" \
                "$m/cmd/containerd-shim-runc-v2@$CONTAINERD_VERSION" \
      && go build -tags "no_btrfs no_devmapper no_zfs urfave_cli_no_docs" \
           -ldflags "-s -w -X $m/version.Version=$CONTAINERD_VERSION -X $m/version.Revision=gomod" \
           -o "$dir.tmp/" "$m/cmd/containerd" "$m/cmd/ctr" "$m/cmd/containerd-shim-runc-v2")
    rm -rf "$dir"; mv "$dir.tmp" "$dir"
  fi
  for c in containerd ctr containerd-shim-runc-v2; do ln -sfn "containerd-$CONTAINERD_VERSION/$c" "$BIN/$c"; done
}

build_coredns() {
  if have coredns "$COREDNS_VERSION"; then say "coredns $COREDNS_VERSION: cached"; link coredns "$COREDNS_VERSION"; return; fi
  say "coredns $COREDNS_VERSION: building (kubernetes, cache, errors, health, ready plugins)"
  local d="$WORK/coredns-$COREDNS_VERSION"
  rm -rf "$d"; mkdir -p "$d"
  # coredns.go of CoreDNS itself imports every plugin (cloud DNS SDKs included); this main
  # imports the server and the plugins our Corefile uses, nothing else.
  cat > "$d/main.go" <<'GO'
package main

import (
	_ "github.com/coredns/coredns/plugin/cache"
	_ "github.com/coredns/coredns/plugin/errors"
	_ "github.com/coredns/coredns/plugin/health"
	_ "github.com/coredns/coredns/plugin/kubernetes"
	_ "github.com/coredns/coredns/plugin/ready"

	"github.com/coredns/coredns/coremain"
)

func main() { coremain.Run() }
GO
  (cd "$d" && go mod init gpu-auditor.local/coredns >/dev/null 2>&1 \
    && go get "github.com/coredns/coredns@$COREDNS_VERSION" && go mod tidy \
    && go build -ldflags "-s -w -X github.com/coredns/coredns/coremain.GitCommit=gomod" \
         -o "$BIN/coredns-$COREDNS_VERSION.tmp" .)
  mv "$BIN/coredns-$COREDNS_VERSION.tmp" "$BIN/coredns-$COREDNS_VERSION"
  link coredns "$COREDNS_VERSION"
}

build_pause() {
  local key="$PAUSE_VERSION" archive="$IMAGES/pause-$PAUSE_VERSION.oci.tar"
  if ! have pause "$key"; then
    say "pause $key: compiling build/pause/linux/pause.c of k8s.io/kubernetes@$KUBE_VERSION"
    local src
    src="$(go mod download -json "k8s.io/kubernetes@$KUBE_VERSION" | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",*$/\1/p')/build/pause/linux/pause.c"
    [ -f "$src" ] || { say "error: $src not found"; exit 1; }
    gcc -Os -Wall -Werror -static -DVERSION="v$PAUSE_VERSION-gpu-auditor" -o "$BIN/pause-$key.tmp" "$src"
    mv "$BIN/pause-$key.tmp" "$BIN/pause-$key"
  fi
  link pause "$key"
  if [ -f "$archive" ] && [ "$archive" -nt "$BIN/pause-$key" ]; then say "pause image: cached"; return; fi
  say "pause image: $PAUSE_IMAGE from scratch"
  local b
  b="$(buildah --storage-driver overlay from scratch)"
  buildah --storage-driver overlay copy --chmod 0755 "$b" "$BIN/pause-$key" /pause >/dev/null
  buildah --storage-driver overlay config --entrypoint '["/pause"]' --user 65535:65535 "$b"
  buildah --storage-driver overlay commit -q --rm "$b" "$PAUSE_IMAGE" >/dev/null
  rm -f "$archive.tmp"
  buildah --storage-driver overlay push -q "$PAUSE_IMAGE" "oci-archive:$archive.tmp:$PAUSE_IMAGE"
  mv "$archive.tmp" "$archive"
}

PAUSE_IMAGE="localhost/gpu-auditor/pause:$PAUSE_VERSION"
start=$(date +%s)
ensure_debian_packages runc:runc /usr/lib/cni/bridge:containernetworking-plugins \
  iptables:iptables conntrack:conntrack buildah:buildah gcc:gcc /usr/include/stdio.h:libc6-dev
build_kube kubelet kube-proxy
build_containerd
build_coredns
build_pause
say "done in $(( $(date +%s) - start ))s: $BIN"
echo "$BIN"
