# Sourced by tests/infra/build-*-image.sh: the steps every cached Debian test image shares.
#   image_cached NAME TAG          take the build lock /var/tmp/faden-NAME-image.lock (held until
#                                  the script exits: parallel test workers build once); when TAG
#                                  exists already, print it and exit 0
#   debootstrap_root NAME ARGS...  debootstrap ARGS (before the suite: --variant, --include...) of
#                                  bookworm into a fresh $root, removed on exit; the log only on failure
#   import_root TAG [OPTIONS...]   drop apt's caches, `docker import` $root as TAG with OPTIONS, print TAG
image_cached() {
  exec 9>"/var/tmp/faden-$1-image.lock"
  flock 9
  if docker image inspect "$2" >/dev/null 2>&1; then
    echo "$2"
    exit 0
  fi
}

debootstrap_root() {
  local name=$1
  shift
  command -v debootstrap >/dev/null || {
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq debootstrap >/dev/null
  }
  root=$(mktemp -d "/var/tmp/faden-$name-root.XXXXXX")
  trap 'rm -rf "$root" "$root.log"' EXIT
  debootstrap "$@" bookworm "$root" "${FADEN_TEST_DEBIAN_MIRROR:-http://deb.debian.org/debian}" >"$root.log" 2>&1 \
    || { tail -30 "$root.log" >&2; exit 1; }
}

import_root() {
  local tag=$1
  shift
  rm -rf "$root"/var/cache/apt/archives/*.deb "$root"/var/lib/apt/lists/*
  tar -C "$root" --numeric-owner -c . | docker import "$@" - "$tag" >/dev/null
  echo "$tag"
}
