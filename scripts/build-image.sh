#!/usr/bin/env bash
# Build the project's image from its Dockerfile, unchanged, as `docker build` would, but
# without a Docker daemon or a registry: buildah builds it on a local stand-in for
# python:3.12-slim (a minimal Debian root made by mmdebstrap, with a venv first on PATH), passed
# through the Dockerfile's own `ARG PYTHON_IMAGE`. See ../shared/facts/container-build.md and
# docs/real-node.md.
#
#   scripts/build-image.sh        # build (or reuse) the image of this tree; prints its reference
#   IMAGE=localhost/gpu-auditor:dev scripts/build-image.sh    # the moving tag (default as shown)
#
# Outputs:
#   localhost/gpu-auditor:ctx-<hash>  the image of exactly this build context (containers-storage);
#                                     <hash> covers the Dockerfile, .dockerignore and every file
#                                     the context sends, so a warm run with no change is a no-op
#   $IMAGE                            the same image under a moving tag
#   ~/.cache/gpu-auditor/images/gpu-auditor-ctx-<hash>.oci.tar   an OCI archive of it, for
#                                     `ctr -n k8s.io images import` on a node (tests/e2e)
# The last line on stdout is the ctx reference. Needs root (buildah/podman with overlay storage).
set -euo pipefail
cd "$(dirname "$0")/.."
here="$(pwd)/scripts"
SAY_PREFIX=build-image
# shellcheck source=lib/debian-tools.sh
. "$here/lib/debian-tools.sh"
say() { printf '[build-image] %s\n' "$*" >&2; }

IMAGE="${IMAGE:-localhost/gpu-auditor:dev}"
BASE_SUITE="${BASE_SUITE:-trixie}"
BASE_PACKAGES="python3,python3-venv,python3-pip,ca-certificates,passwd"
BASE_IMAGE="localhost/gpu-auditor/pybase:$BASE_SUITE"
CACHE="${GPU_AUDITOR_CACHE:-$HOME/.cache/gpu-auditor}"
IMAGES="$CACHE/images"
STORAGE=(--storage-driver overlay)
mkdir -p "$IMAGES"

ensure_debian_packages buildah:buildah podman:podman runc:runc mmdebstrap:mmdebstrap newuidmap:uidmap

# One build at a time per machine: several worktrees share containers-storage and the cache.
exec 9>"$IMAGES/.lock"
flock 9

start=$(date +%s)

# ---- the build context's hash: what `docker build .` would send, per .dockerignore --------------
context_hash() {
  {
    sha256sum Dockerfile .dockerignore
    # .dockerignore sends pyproject.toml, README.md, operator/, node_agent/ and the probe's
    # files minus bytecode and egg-info; hash the same set (tracked or not), in a stable order.
    find pyproject.toml README.md operator node_agent probe/sitecustomize.py \
      probe/gpu_auditor_probe -type f \
      ! -path '*/__pycache__/*' ! -name '*.pyc' ! -path '*.egg-info/*' -print0 \
      | LC_ALL=C sort -z | xargs -0 sha256sum
    echo "base=$BASE_SUITE:$BASE_PACKAGES"
  } | sha256sum | cut -c1-16
}
ctx="$(context_hash)"
REF="localhost/gpu-auditor:ctx-$ctx"
ARCHIVE="$IMAGES/gpu-auditor-ctx-$ctx.oci.tar"

# ---- the base: a local python image (cached as a tarball and in containers-storage) --------
base_key="$(printf '%s %s' "$BASE_SUITE" "$BASE_PACKAGES" | sha256sum | cut -c1-12)"
BASE_TAR="$IMAGES/pybase-$BASE_SUITE-$base_key.tar"
if podman "${STORAGE[@]}" image exists "$BASE_IMAGE" \
   && [ "$(podman "${STORAGE[@]}" image inspect --format '{{index .Labels "gpu-auditor.base-key"}}' "$BASE_IMAGE" 2>/dev/null)" = "$base_key" ]; then
  say "base $BASE_IMAGE: cached"
else
  if [ ! -s "$BASE_TAR" ]; then
    say "base: mmdebstrap $BASE_SUITE ($BASE_PACKAGES) with a venv at /opt/venv"
    # No mirror argument: mmdebstrap uses this machine's apt sources. Debian's system pip
    # refuses installs ("externally managed"), so the image's pip is a venv's, first on PATH.
    mmdebstrap --quiet --format=tar --variant=minbase --include="$BASE_PACKAGES" \
      --customize-hook='chroot "$1" python3 -m venv /opt/venv' \
      "$BASE_SUITE" "$BASE_TAR.tmp"
    mv "$BASE_TAR.tmp" "$BASE_TAR"
  fi
  say "base: importing $BASE_TAR as $BASE_IMAGE"
  podman "${STORAGE[@]}" import --quiet \
    --change 'ENV PATH=/opt/venv/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
    --change 'ENV LANG=C.UTF-8' --change "LABEL gpu-auditor.base-key=$base_key" \
    "$BASE_TAR" "$BASE_IMAGE" >/dev/null
fi

# ---- the image ---------------------------------------------------------------------------
if podman "${STORAGE[@]}" image exists "$REF"; then
  say "image $REF: cached (build context unchanged)"
else
  say "image: buildah bud -f Dockerfile --build-arg PYTHON_IMAGE=$BASE_IMAGE -> $REF"
  # chroot isolation and the host network (pip reaches PyPI); the host's CA bundle is mounted
  # for the build steps only, never baked into the image. --layers reuses unchanged steps.
  buildah "${STORAGE[@]}" bud --quiet --layers --isolation chroot --network host --pull=never \
    -v /etc/ssl/certs/ca-certificates.crt:/etc/ssl/certs/ca-certificates.crt:ro \
    --build-arg "PYTHON_IMAGE=$BASE_IMAGE" -f Dockerfile -t "$REF" . >&2
fi
podman "${STORAGE[@]}" tag "$REF" "$IMAGE"

if [ ! -s "$ARCHIVE" ]; then
  say "archive: $ARCHIVE"
  rm -f "$ARCHIVE.tmp"
  podman "${STORAGE[@]}" save --quiet --format oci-archive -o "$ARCHIVE.tmp" "$REF"
  mv "$ARCHIVE.tmp" "$ARCHIVE"
fi

# ---- pruning: every changed context adds ~200 MB of layers -------------------------------------
# Keep the newest 5 images of other contexts (and the build cache's 5 newest intermediates),
# and anything younger than an hour: another worktree's test run may be using it right now.
old_images() { # podman-images-filter... -> IDs beyond the newest 5 and older than an hour
  podman "${STORAGE[@]}" images --format json "$@" | python3 -c '
import json, sys, time
images = sorted(json.load(sys.stdin), key=lambda i: i["Created"], reverse=True)
seen = []
for i in images:
    if i["Id"] not in seen:
        seen.append(i["Id"])
created = {i["Id"]: i["Created"] for i in images}
print("\n".join(i for i in seen[5:] if created[i] < time.time() - 3600))'
}
current_id="$(podman "${STORAGE[@]}" image inspect --format '{{.Id}}' "$REF")"
for id in $(old_images --filter 'reference=localhost/gpu-auditor:ctx-*') \
          $(old_images --filter dangling=true --filter label=gpu-auditor.base-key); do
  [ "$id" = "$current_id" ] || podman "${STORAGE[@]}" rmi "$id" >/dev/null 2>&1 || true
done
ls -1t "$IMAGES"/gpu-auditor-ctx-*.oci.tar 2>/dev/null | tail -n +6 \
  | while read -r f; do if [ -n "$(find "$f" -mmin +60)" ]; then rm -f "$f"; fi; done
say "done in $(( $(date +%s) - start ))s: $REF (also $IMAGE)"
echo "$REF"
