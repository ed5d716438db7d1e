#!/bin/sh
# faden-agent standalone build @VERSION@ (@ARCH@)
# This shell header is followed by a tar.gz of the frozen agent (a PyInstaller onedir
# build). The first start of a build unpacks it once into a per-user cache, keyed by the
# build id; every start then execs the agent from there: nothing is unpacked per start and
# no launcher process stays around (the agent is systemd's main process).
#   root:        /var/cache/faden-agent/<build>/
#   other users: ${XDG_CACHE_HOME:-~/.cache}/faden-agent/<build>/ (else $TMPDIR/faden-agent-<uid>)
#   FADEN_AGENT_UNPACK_DIR overrides the parent directory.
# Unpacking goes to .unpack.<pid>.* and is renamed into place, so a second start at the
# same moment, or a start killed half-way, never runs a half-unpacked build. The agent
# (faden_agent/service/standalone.py) removes older builds once no process of them runs, and what
# killed launchers left. The fast path forks nothing: it tests, then execs.
set -eu
build=@BUILD@
payload_offset=@OFFSET@

die() { printf 'faden-agent: %s\n' "$*" >&2; exit 1; }

case $0 in
  /*) self=$0 ;;
  *) self=$PWD/$0 ;;
esac
uid=
while read -r key _real effective _; do
  if [ "$key" = Uid: ]; then uid=$effective; break; fi
done </proc/self/status
[ -n "$uid" ] || die "cannot read my user id from /proc/self/status"
fallback=${TMPDIR:-/tmp}/faden-agent-$uid
if [ -n "${FADEN_AGENT_UNPACK_DIR:-}" ]; then
  base=$FADEN_AGENT_UNPACK_DIR
elif [ "$uid" = 0 ]; then
  base=/var/cache/faden-agent
elif [ -n "${XDG_CACHE_HOME:-}${HOME:-}" ]; then
  base=${XDG_CACHE_HOME:-$HOME/.cache}/faden-agent
else
  base=$fallback
fi

run() {
  # The path of this file, not of the unpacked build: what `faden-agent start` writes into
  # the unit's ExecStart, and where the agent starts over if its build went away.
  FADEN_AGENT_EXECUTABLE=$self
  export FADEN_AGENT_EXECUTABLE
  exec "$base/$build/faden-agent" "$@"
}

# The agent runs code from here: only its own user may have made it. (Another user can
# make $TMPDIR/faden-agent-<uid> first, but never a directory owned by this user.)
if [ -x "$base/$build/faden-agent" ] && [ -O "$base" ] && [ -O "$base/$build" ]; then
  run "$@"
fi

own_base() {
  [ -d "$base" ] || mkdir -p -m 0700 "$base" 2>/dev/null || return 1
  [ -O "$base" ] || die "$base belongs to another user: remove it or set FADEN_AGENT_UNPACK_DIR"
  case $(stat -c %a "$base") in
    *[2367]?|*[2367]) die "$base is writable by other users: chmod 0700 it or set FADEN_AGENT_UNPACK_DIR" ;;
  esac
}
if ! own_base; then
  base=$fallback
  own_base || die "cannot create $base (and not ${FADEN_AGENT_UNPACK_DIR:-the cache directory} either)"
fi
if [ ! -x "$base/$build/faden-agent" ]; then
  # Traps first, and by our pid, not by $tmp: a signal between mktemp and the assignment
  # would otherwise leave the half behind.
  trap 'rm -rf "$base"/.unpack.$$.*' EXIT
  trap 'exit 129' HUP; trap 'exit 130' INT; trap 'exit 143' TERM
  tmp=$(mktemp -d "$base/.unpack.$$.XXXXXX") || die "cannot create a directory in $base"
  tail -c +"$((payload_offset + 1))" "$self" | tar -xzof - -C "$tmp" \
    || die "cannot unpack $self into $base (disk full? a truncated download?)"
  [ -x "$tmp/faden-agent" ] || die "$self holds no faden-agent executable (a truncated download?)"
  # Whoever renames first wins; a loser discards its copy (mv onto an existing directory
  # would nest it, hence the test and the removal of a nested leftover).
  [ -e "$base/$build" ] || mv "$tmp" "$base/$build" 2>/dev/null || true
  rm -rf "$tmp" "$base/$build/${tmp##*/}"
  trap - EXIT HUP INT TERM
fi
[ -O "$base/$build" ] || die "$base/$build belongs to another user"
run "$@"
