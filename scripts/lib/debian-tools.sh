# Sourced by scripts/build-image.sh and scripts/build-node.sh: install Debian packages for the
# commands (or files) that are missing, as scripts/install-tools.sh does for promtool.
#
#   ensure_debian_packages buildah:buildah /usr/lib/cni/bridge:containernetworking-plugins
#
# Each argument is WHAT:PACKAGE; WHAT is a command name, or an absolute path that must exist.

ensure_debian_packages() {
  local want=() item what pkg
  for item in "$@"; do
    what="${item%%:*}" pkg="${item#*:}"
    if [ "${what#/}" != "$what" ]; then [ -e "$what" ] && continue
    else command -v "$what" >/dev/null 2>&1 && continue
    fi
    want+=("$pkg")
  done
  [ ${#want[@]} -eq 0 ] && return 0
  if ! command -v apt-get >/dev/null 2>&1; then
    printf '[%s] error: missing %s and no apt-get to install them; install them by hand\n' \
      "${SAY_PREFIX:-tools}" "${want[*]}" >&2
    return 1
  fi
  local sudo=""
  [ "$(id -u)" -eq 0 ] || sudo="sudo"
  printf '[%s] installing Debian packages: %s\n' "${SAY_PREFIX:-tools}" "${want[*]}" >&2
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${want[@]}" >/dev/null
}
