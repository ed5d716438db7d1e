#!/usr/bin/env bash
# Make the release directory: OUT/node-agent-v<version>/ with
#   faden-agent-linux-x86_64   faden-agent-linux-x86_64.sha256   faden-agent-linux-x86_64.size
#   faden-agent-linux-aarch64  faden-agent-linux-aarch64.sha256  faden-agent-linux-aarch64.size
#   install.sh
# which is what an operator copies into the server's agent-binaries/ directory (the
# reference backend serves it: `faden-agent dev-backend --downloads OUT/node-agent-v<version>`).
# Each binary says its version in its header, so no version file goes with them.
#
#   bash packaging/release.sh OUT          # builds what is missing or stale, both architectures
#
# x86_64 is built here (packaging/build.sh), aarch64 under emulation (packaging/build-aarch64.sh,
# slow the first time). FADEN_AGENT_BUILD_VERSION stamps another version, as for build.sh.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
repo=$(dirname "$here")
[ $# -eq 1 ] || { echo "usage: packaging/release.sh OUT" >&2; exit 2; }
out=$1
cd "$repo"

dist="${FADEN_AGENT_DIST:-$repo/dist}"
export FADEN_AGENT_DIST="$dist"

bash packaging/build.sh
bash packaging/build-aarch64.sh

# What a build says it is (its header's second line): "<version> <arch>".
build_says() {
  sed -n '2s/^# faden-agent standalone build \([^ ]*\) (\([a-z0-9_]*\))$/\1 \2/p' "$dist/faden-agent-linux-$1"
}
version=$(build_says x86_64 | cut -d' ' -f1)
[ -n "$version" ] || { echo "release.sh: $dist/faden-agent-linux-x86_64 is not a standalone build" >&2; exit 1; }
tag="node-agent-v$version"
mkdir -p "$out"
staging=$(mktemp -d "$out/.$tag.XXXXXX")
trap 'rm -rf "$staging"' EXIT
for arch in x86_64 aarch64; do
  name="faden-agent-linux-$arch"
  said=$(build_says "$arch")
  [ "$said" = "$version $arch" ] || { echo "release.sh: $dist/$name says '$said', expected '$version $arch'" >&2; exit 1; }
  cp "$dist/$name" "$dist/$name.sha256" "$staging/"
  wc -c <"$dist/$name" | tr -d ' ' >"$staging/$name.size"  # install.sh's download bound
done
cp packaging/install.sh "$staging/install.sh"
chmod 0755 "$staging"/faden-agent-linux-* "$staging/install.sh"
chmod 0644 "$staging"/*.sha256 "$staging"/*.size
(cd "$staging" && sha256sum --quiet -c ./*.sha256)
chmod 0755 "$staging"
# A previous directory of the same tag is replaced whole (never a mix of two builds).
if [ -e "$out/$tag" ]; then
  mv "$out/$tag" "$staging.old"
  trap 'rm -rf "$staging" "$staging.old"' EXIT
fi
mv "$staging" "$out/$tag"
echo "release.sh: $out/$tag"
ls -l "$out/$tag"
