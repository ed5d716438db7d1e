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
# installed build in place and running. Every download is bounded in time (no data for
# FADEN_AGENT_DOWNLOAD_STALL_SEC, or longer than FADEN_AGENT_DOWNLOAD_TIMEOUT_SEC in all) and in
# size: the build's size from the server (<build>.size, written by packaging/build.sh) when it
# has one, else 256 MiB, and no more than that lands on disk. It says which version the
# backend expects (GET /api/agent/v1/expected-version) when the server's build is another,
# refuses to replace a newer installed build with an older one, and stops before anything
# when run as root where the agent is a user service, or as a user where it is the system
# service, naming the command to run instead.
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
#   FADEN_AGENT_DOWNLOAD_TIMEOUT_SEC  longest time one download may take (default 900)
#   FADEN_AGENT_DOWNLOAD_STALL_SEC    longest time one download may go without data (default 30)
#   FADEN_AGENT_ALLOW_DOWNGRADE=1  install the server's build even when it is older than the installed one
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
  max_s="${FADEN_AGENT_DOWNLOAD_TIMEOUT_SEC:-900}"
  stall_s="${FADEN_AGENT_DOWNLOAD_STALL_SEC:-30}"
  for setting in "INSTALL_WAIT_SEC=$wait_s" "DOWNLOAD_TIMEOUT_SEC=$max_s" "DOWNLOAD_STALL_SEC=$stall_s"; do
    case "${setting#*=}" in
      ''|*[!0-9]*|0) die "FADEN_AGENT_$setting: expected whole seconds above 0" ;;
    esac
  done
  small_max=4096                 # a .sha256 or .size file, the expected-version answer
  build_max=268435456            # 256 MiB: a build without .size, and the most a .size may say (x86_64: 25 MiB)
  allow_downgrade="${FADEN_AGENT_ALLOW_DOWNGRADE:-0}"

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

  # One agent per machine: the line runs as the installed agent's owner (root for the system
  # service, its user for a user service), or it would install a second agent beside it.
  system_unit=/etc/systemd/system/faden-agent.service
  user_unit_of() {  # user_unit_of HOME
    printf '%s/.config/systemd/user/faden-agent.service' "$1"
  }
  line_env="FADEN_NODE_AGENT_BACKEND_URL=$backend${FADEN_AGENT_DOWNLOAD_URL:+ FADEN_AGENT_DOWNLOAD_URL=$downloads}"
  if [ "$(id -u)" != 0 ]; then
    [ ! -e "$system_unit" ] || die "an agent runs here as the system service ($system_unit); run the install line as root instead: curl -fsSL $backend/downloads/install.sh | sudo $line_env sh"
  elif [ ! -e "$system_unit" ]; then
    # Who else has a user service: the user who ran sudo first, then every account.
    owner=""
    accounts=$( { [ -z "${SUDO_USER:-}" ] || getent passwd "$SUDO_USER"; getent passwd || cat /etc/passwd; } 2>/dev/null \
      | awk -F: '$3 != 0 && $6 != "" { print $1 ":" $6 }')
    while IFS=: read -r account home; do
      [ -n "$account" ] && [ -e "$(user_unit_of "$home")" ] || continue
      owner=$account
      owner_unit=$(user_unit_of "$home")
      break
    done <<ACCOUNTS
$accounts
ACCOUNTS
    [ -z "$owner" ] || die "an agent runs here as a user service of $owner ($owner_unit); run the install line as $owner, without sudo: curl -fsSL $backend/downloads/install.sh | $line_env sh"
  fi

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
  tmp_size=$(mktemp "$dir/.faden-agent.size.XXXXXX")
  tmp_rc=$(mktemp "$dir/.faden-agent.rc.XXXXXX")
  tmp_expected=$(mktemp "$dir/.faden-agent.expected.XXXXXX")
  trap 'rm -f "$tmp_bin" "$tmp_sum" "$tmp_size" "$tmp_rc" "$tmp_expected"' EXIT INT TERM
  command -v curl >/dev/null 2>&1 || command -v wget >/dev/null 2>&1 || die "neither curl nor wget is installed"

  get() {  # get URL: the body on stdout, bounded in time
    if command -v curl >/dev/null 2>&1; then
      if [ "$allow_http" = 1 ]; then protos='=http,https'; else protos='=https'; fi
      # --cacert wins over CURL_CA_BUNDLE and the system store; under 1 byte/s for
      # stall_s seconds (no data, headers included) ends it like max_s does (exit 28).
      curl -fsSL --retry 2 --retry-max-time "$max_s" --connect-timeout 15 --max-time "$max_s" \
        --speed-limit 1 --speed-time "$stall_s" \
        --proto "$protos" --proto-redir "$protos" ${ca:+--cacert "$ca"} "$1"
    else
      if [ "$allow_http" = 1 ]; then only=''; else only='--https-only'; fi
      if command -v timeout >/dev/null 2>&1; then limit="timeout $max_s"; else limit=''; fi
      $limit wget -q --tries=1 --timeout="$stall_s" $only ${ca:+--ca-certificate="$ca"} -O - "$1"
    fi
  }
  version_older() {  # version_older A B: A sorts before B (0.9.0 < 0.10.0 < 0.10.0.post1 < 0.10.0.post1+local)
    awk -v a="$1" -v b="$2" 'BEGIN {
      na = split(a, pa, "+"); nb = split(b, pb, "+")
      ra = pa[1]; rb = pb[1]; gsub(/[^0-9]+/, " ", ra); gsub(/[^0-9]+/, " ", rb)
      ka = split(ra, x, " "); kb = split(rb, y, " ")
      for (i = 1; i <= ka && i <= kb; i++) {
        if (x[i] + 0 < y[i] + 0) exit 0
        if (x[i] + 0 > y[i] + 0) exit 1
      }
      if (ka != kb) exit (ka < kb ? 0 : 1)
      exit (substr(a, length(pa[1]) + 2) < substr(b, length(pb[1]) + 2) ? 0 : 1)
    }'
  }
  fetch() {  # fetch URL FILE MAX_BYTES WHOSE_LIMIT: at most MAX_BYTES (+1, to tell) land in FILE; else $why
    { rc=0; get "$1" || rc=$?; echo "$rc" >"$tmp_rc"; } | head -c "$(($3 + 1))" >"$2"
    got=$(wc -c <"$2" | tr -d ' ')
    rc=$(cat "$tmp_rc")
    if [ "$got" -gt "$3" ]; then
      why="download of $1 stopped: the server sent more than the $3 bytes $4"
    elif [ "$rc" = 28 ] || [ "$rc" = 124 ]; then
      why="download of $1 timed out: no data for ${stall_s}s, or not done within ${max_s}s (FADEN_AGENT_DOWNLOAD_STALL_SEC, FADEN_AGENT_DOWNLOAD_TIMEOUT_SEC)"
    elif [ "$rc" = 4 ] && ! command -v curl >/dev/null 2>&1; then  # wget: a read timeout is a network failure
      why="download of $1 failed: a network failure, or no data for ${stall_s}s (wget exit 4)"
    elif [ "$rc" != 0 ]; then
      why="download of $1 failed (exit $rc)"
    else
      return 0
    fi
    return 1
  }

  http_error() {  # the last fetch got an HTTP error answer (curl -f: 22; wget: 8), not a network failure
    [ "$rc" = 22 ] || { [ "$rc" = 8 ] && ! command -v curl >/dev/null 2>&1; }
  }

  fetch "$downloads/$name.sha256" "$tmp_sum" "$small_max" "a checksum file may have" || keep_old "$why"
  # The size is optional (the builds and their .sha256 are what an offline server needs):
  # without it the download is bounded by build_max, and the checksum checks it all the same.
  size=""
  if fetch "$downloads/$name.size" "$tmp_size" "$small_max" "a size file may have"; then
    size=$(tr -d ' \t\r\n' <"$tmp_size")
    case "$size" in
      ''|*[!0-9]*) keep_old "$name.size from $downloads is not a number of bytes" ;;
    esac
    { [ "${#size}" -le 10 ] && [ "$size" -le "$build_max" ]; } || keep_old "$name.size from $downloads says $size bytes: more than any build ($build_max)"
    fetch "$downloads/$name" "$tmp_bin" "$size" "it announced in $name.size" || keep_old "$why"
    got=$(wc -c <"$tmp_bin" | tr -d ' ')
    [ "$got" = "$size" ] || keep_old "download of $downloads/$name cut short: $got of the $size bytes announced"
  else
    http_error || keep_old "$why"
    say "no $name.size on the server: the download is bounded by $build_max bytes and checked against $name.sha256"
    fetch "$downloads/$name" "$tmp_bin" "$build_max" "a build may have (no $name.size on the server)" || keep_old "$why"
  fi

  expected=$(cut -d' ' -f1 "$tmp_sum" | head -n1)
  actual=$(sha256sum "$tmp_bin" | cut -d' ' -f1)
  case "$expected" in
    *[!0-9a-f]*|"") keep_old "$name.sha256 from $downloads is not a sha256sum line" ;;
  esac
  [ "${#expected}" -eq 64 ] || keep_old "$name.sha256 from $downloads is not a sha256sum line"
  [ "$expected" = "$actual" ] || keep_old "checksum mismatch for $name (expected $expected, got $actual): the download is corrupt or tampered with"

  chmod 0755 "$tmp_bin"
  new_version=$("$tmp_bin" --version 2>/dev/null) || keep_old "the downloaded build does not run on this machine"

  # The version the backend expects here (no credential needed), against the server's build.
  if fetch "$backend/api/agent/v1/expected-version?arch=$arch" "$tmp_expected" "$small_max" "an answer may have"; then
    wanted=$(sed -n 's/.*"version": *"\([0-9A-Za-z.+_-]\{1,64\}\)".*/\1/p' "$tmp_expected" | head -n 1)
    if [ -z "$wanted" ]; then
      say "the backend names no version it expects on $arch machines"
    elif [ "faden-agent $wanted" = "$new_version" ]; then
      say "the backend expects faden-agent $wanted: the server's build is that one"
    else
      say "the backend expects faden-agent $wanted, but the server's build is $new_version: put the $wanted builds in the server's agent-binaries folder"
    fi
  else
    say "the backend does not say which version it expects ($why)"
  fi

  # Never an older build over a newer one, unless asked.
  if [ -n "$old_version" ] && version_older "${new_version#faden-agent }" "${old_version#faden-agent }"; then
    [ "$allow_downgrade" = 1 ] || keep_old "the server's build is $new_version, older than the installed $old_version: not installed (set FADEN_AGENT_ALLOW_DOWNGRADE=1 to go back to it)"
    say "going back from $old_version to the older $new_version (FADEN_AGENT_ALLOW_DOWNGRADE=1)"
  fi

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
