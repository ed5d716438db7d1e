#!/bin/sh
# faden-agent installer: what the console's "Add a machine" line runs, e.g.
#
#   curl -fsSL https://BACKEND/downloads/install.sh | \
#     FADEN_NODE_AGENT_BACKEND_URL=https://BACKEND FADEN_NODE_AGENT_ENROLLMENT_TOKEN=TOKEN sh
#
# As root: /usr/local/bin/faden-agent and a system service; as a user: ~/.local/bin and a
# user service. Downloads the build for this machine's architecture from the backend,
# verifies its .sha256, replaces the binary atomically, (re)starts the service and waits
# until the new build is connected to the backend; a new build that does not get there is
# replaced by the previous one again (rolled back), and the installer says so.
# Run again on a member machine it upgrades in place: same state file, same node id, no
# new enrollment; containers keep running. Any download or checksum failure leaves the
# installed build in place and running.
#
# The whole script is one function, called on the last line: a download cut short runs
# nothing at all (sh reads an unfinished function as a syntax error).
#
# Settings: every FADEN_NODE_AGENT_* variable goes to the service's environment file
# (0600). The token is passed by environment only, never as an argument (argv is public).
#   FADEN_AGENT_DOWNLOAD_URL   where the builds are (default: $FADEN_NODE_AGENT_BACKEND_URL/downloads)
#   FADEN_AGENT_INSTALL_DIR    where the binary goes (default: /usr/local/bin, or ~/.local/bin)
#   FADEN_AGENT_ALLOW_HTTP=1   allow http:// URLs (default: https only, redirects included)
#   FADEN_AGENT_INSTALL_WAIT_SEC  how long the new build has to connect (default 120)
#   FADEN_NODE_AGENT_CA_BUNDLE private CA of the backend, also used for the download (when
#                              unset, the one in the installed service's environment file)

faden_agent_install() {
  set -eu

  say() { printf 'faden-agent install: %s\n' "$*" >&2; }
  die() { say "$*"; exit 1; }

  backend="${FADEN_NODE_AGENT_BACKEND_URL:-}"
  [ -n "$backend" ] || die "set FADEN_NODE_AGENT_BACKEND_URL to the backend's URL (the console's install line does)"
  backend="${backend%/}"
  downloads="${FADEN_AGENT_DOWNLOAD_URL:-$backend/downloads}"
  downloads="${downloads%/}"
  allow_http="${FADEN_AGENT_ALLOW_HTTP:-0}"
  wait_s="${FADEN_AGENT_INSTALL_WAIT_SEC:-120}"
  case "$wait_s" in
    ''|*[!0-9]*) die "FADEN_AGENT_INSTALL_WAIT_SEC=$wait_s: expected whole seconds" ;;
  esac

  require_https() {  # require_https NAME URL
    case "$2" in
      https://*) ;;
      http://*) [ "$allow_http" = 1 ] || die "$1=$2 is not https: the build and the token would travel in the clear (set FADEN_AGENT_ALLOW_HTTP=1 to allow it, e.g. on a test network)" ;;
      *) die "$1=$2 is not an https:// URL" ;;
    esac
  }
  require_https FADEN_NODE_AGENT_BACKEND_URL "$backend"
  require_https FADEN_AGENT_DOWNLOAD_URL "$downloads"

  case "$(uname -m)" in
    x86_64|amd64) arch=x86_64 ;;
    aarch64|arm64) arch=aarch64 ;;
    *) die "no build for this architecture: $(uname -m)" ;;
  esac
  name="faden-agent-linux-$arch"

  if [ "$(id -u)" = 0 ]; then
    dir="${FADEN_AGENT_INSTALL_DIR:-/usr/local/bin}"
    env_file=/etc/faden-agent/agent.env
  else
    dir="${FADEN_AGENT_INSTALL_DIR:-$HOME/.local/bin}"
    env_file="${XDG_CONFIG_HOME:-$HOME/.config}/faden-agent/agent.env"
  fi
  target="$dir/faden-agent"
  previous="$dir/.faden-agent.previous"

  # The CA bundle: the variable, else what the installed service uses (an upgrade run with
  # only the backend URL must still trust the backend's private CA).
  ca="${FADEN_NODE_AGENT_CA_BUNDLE:-}"
  if [ -z "$ca" ] && [ -r "$env_file" ]; then
    ca=$(sed -n 's/^FADEN_NODE_AGENT_CA_BUNDLE="\{0,1\}\([^"]*\)"\{0,1\}$/\1/p' "$env_file" | tail -n 1)
  fi
  [ -z "$ca" ] || [ -r "$ca" ] || die "FADEN_NODE_AGENT_CA_BUNDLE=$ca: no readable file"

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
    if command -v curl >/dev/null 2>&1; then
      if [ "$allow_http" = 1 ]; then protos='=http,https'; else protos='=https'; fi
      # --cacert wins over CURL_CA_BUNDLE and the system store.
      curl -fsSL --retry 2 --connect-timeout 15 --proto "$protos" --proto-redir "$protos" \
        ${ca:+--cacert "$ca"} -o "$2" "$1"
    elif command -v wget >/dev/null 2>&1; then
      if [ "$allow_http" = 1 ]; then only=''; else only='--https-only'; fi
      wget -q $only ${ca:+--ca-certificate="$ca"} -O "$2" "$1"
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

  # Health: the running agent is the build we expect and its link is connected (its
  # heartbeats go through) -- or, when the old build was not connected either (the backend
  # is down right now), at least that the new build runs.
  runs() {  # runs VERSION: the supervisor of this build answers
    "$target" ps --json 2>/dev/null | grep -q "\"version\": \"${1#faden-agent }\""
  }
  healthy() {  # healthy VERSION
    runs "$1" || return 1
    [ "$need_connected" = 0 ] || "$target" status >/dev/null 2>&1
  }
  wait_healthy() {  # wait_healthy VERSION
    waited=0
    while ! healthy "$1"; do
      [ "$waited" -lt "$wait_s" ] || return 1
      sleep 2
      waited=$((waited + 2))
    done
  }
  need_connected=1
  if [ -n "$old_version" ] && ! "$target" status >/dev/null 2>&1; then
    need_connected=0
  fi
  goal=$([ "$need_connected" = 1 ] && echo "connect to $backend" || echo "run")

  if [ -n "$old_version" ]; then
    cp -p "$target" "$previous"  # the build to go back to
  fi
  mv -f "$tmp_bin" "$target"
  say "installed $new_version at $target${old_version:+ (was $old_version)}"

  # Writes the unit and the 0600 environment file, enables, starts; restarts a running agent
  # so it runs the new build. The state file (node id, credential) is kept as it is.
  started=1
  "$target" start --restart || started=0
  if [ "$started" = 1 ] && wait_healthy "$new_version"; then
    rm -f "$previous"
    if [ "$need_connected" = 1 ]; then
      say "$new_version runs${old_version:+ instead of $old_version} and is connected to $backend"
    else
      say "$new_version runs${old_version:+ instead of $old_version} (the old build was not connected either; see 'faden-agent status')"
    fi
    return 0
  fi
  if [ -z "$old_version" ]; then
    "$target" status >&2 || true
    die "$new_version did not $goal within ${wait_s}s; there is no previous build to go back to: see 'journalctl -u faden-agent' and 'faden-agent status'"
  fi
  say "$new_version did not $goal within ${wait_s}s; rolling back to $old_version"
  mv -f "$previous" "$target"
  "$target" start --restart || true
  if wait_healthy "$old_version"; then
    die "rolled back: $old_version runs again; $new_version stays uninstalled (see 'journalctl -u faden-agent' for why it failed)"
  fi
  die "rolled back to $old_version, but it does not $goal either: see 'faden-agent status'"
}

faden_agent_install "$@"
