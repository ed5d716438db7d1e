#!/bin/sh
# faden-agent installer: what the console's "Add a machine" line runs, e.g.
#
#   curl -fsSL https://BACKEND/downloads/install.sh | \
#     FADEN_NODE_AGENT_BACKEND_URL=https://BACKEND FADEN_NODE_AGENT_ENROLLMENT_TOKEN=TOKEN sh
#
# As root: /usr/local/bin/faden-agent and a system service; as a user: ~/.local/bin and a
# user service. Downloads the build for this machine's architecture from the backend,
# verifies its .sha256, replaces the binary atomically and (re)starts the service.
# Run again on a member machine it upgrades in place: same state file, same node id, no
# new enrollment; containers keep running. Any download or checksum failure leaves the
# installed build in place and running.
#
# Settings: every FADEN_NODE_AGENT_* variable goes to the service's environment file
# (0600). The token is passed by environment only, never as an argument (argv is public).
#   FADEN_AGENT_DOWNLOAD_URL  where the builds are (default: $FADEN_NODE_AGENT_BACKEND_URL/downloads)
#   FADEN_AGENT_INSTALL_DIR   where the binary goes (default: /usr/local/bin, or ~/.local/bin)
#   FADEN_NODE_AGENT_CA_BUNDLE  private CA of the backend, also used for the download
set -eu

say() { printf 'faden-agent install: %s\n' "$*" >&2; }
die() { say "$*"; exit 1; }

backend="${FADEN_NODE_AGENT_BACKEND_URL:-}"
[ -n "$backend" ] || die "set FADEN_NODE_AGENT_BACKEND_URL to the backend's URL (the console's install line does)"
backend="${backend%/}"
downloads="${FADEN_AGENT_DOWNLOAD_URL:-$backend/downloads}"
downloads="${downloads%/}"

case "$(uname -m)" in
  x86_64|amd64) arch=x86_64 ;;
  aarch64|arm64) arch=aarch64 ;;
  *) die "no build for this architecture: $(uname -m)" ;;
esac
name="faden-agent-linux-$arch"

if [ "$(id -u)" = 0 ]; then
  dir="${FADEN_AGENT_INSTALL_DIR:-/usr/local/bin}"
else
  dir="${FADEN_AGENT_INSTALL_DIR:-$HOME/.local/bin}"
fi
target="$dir/faden-agent"
mkdir -p "$dir"

old_version=""
if [ -x "$target" ]; then
  old_version=$("$target" --version 2>/dev/null || true)
fi
keep_old() {
  if [ -n "$old_version" ]; then
    say "$1; the installed build ($old_version) is unchanged and keeps running"
  else
    say "$1; nothing was installed"
  fi
  exit 1
}

# Temporary files next to the target, so the final rename is atomic (same file system).
tmp_bin=$(mktemp "$dir/.faden-agent.new.XXXXXX")
tmp_sum=$(mktemp "$dir/.faden-agent.sha256.XXXXXX")
trap 'rm -f "$tmp_bin" "$tmp_sum"' EXIT INT TERM

fetch() {  # fetch URL FILE
  ca="${FADEN_NODE_AGENT_CA_BUNDLE:-}"
  if command -v curl >/dev/null 2>&1; then
    if [ -n "$ca" ]; then
      curl -fsSL --retry 2 --connect-timeout 15 --cacert "$ca" -o "$2" "$1"
    else
      curl -fsSL --retry 2 --connect-timeout 15 -o "$2" "$1"
    fi
  elif command -v wget >/dev/null 2>&1; then
    if [ -n "$ca" ]; then
      wget -q --ca-certificate="$ca" -O "$2" "$1"
    else
      wget -q -O "$2" "$1"
    fi
  else
    die "neither curl nor wget is installed"
  fi
}

fetch "$downloads/$name.sha256" "$tmp_sum" || keep_old "download of $downloads/$name.sha256 failed"
fetch "$downloads/$name" "$tmp_bin" || keep_old "download of $downloads/$name failed"

expected=$(cut -d' ' -f1 "$tmp_sum" | head -n1)
actual=$(sha256sum "$tmp_bin" | cut -d' ' -f1)
case "$expected" in
  *[!0-9a-f]*|"") keep_old "$name.sha256 from $downloads is not a sha256sum line" ;;
esac
[ "${#expected}" -eq 64 ] || keep_old "$name.sha256 from $downloads is not a sha256sum line"
[ "$expected" = "$actual" ] || keep_old "checksum mismatch for $name (expected $expected, got $actual): the download is corrupt or tampered with"

chmod 0755 "$tmp_bin"
new_version=$("$tmp_bin" --version 2>/dev/null) || keep_old "the downloaded build does not run on this machine"
mv -f "$tmp_bin" "$target"
say "installed $new_version at $target${old_version:+ (was $old_version)}"

# Writes the unit and the 0600 environment file, enables, starts; restarts a running agent
# so it runs the new build. The state file (node id, credential) is kept as it is.
"$target" start --restart
