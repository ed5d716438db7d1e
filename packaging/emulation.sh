#!/usr/bin/env bash
# Make this x86_64 machine run aarch64 programs (as root): qemu-user-static, binfmt_misc
# mounted, the aarch64 interpreter registered with the "F" flag (the kernel opens the
# emulator once, so it also works inside chroots and containers that lack it).
# Idempotent; fails with one line when it cannot.
set -euo pipefail
command -v qemu-aarch64-static >/dev/null || {
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq qemu-user-static binfmt-support >/dev/null
}
binfmt=/proc/sys/fs/binfmt_misc
[ -e "$binfmt/register" ] || mount -t binfmt_misc binfmt_misc "$binfmt"
if ! grep -q '^enabled' "$binfmt/qemu-aarch64" 2>/dev/null; then
  if command -v update-binfmts >/dev/null; then
    update-binfmts --enable qemu-aarch64 >/dev/null 2>&1 || true
  fi
fi
if ! grep -q '^enabled' "$binfmt/qemu-aarch64" 2>/dev/null; then
  # By hand: the ELF header of an aarch64 executable, and its mask.
  printf '%s' ':qemu-aarch64:M::\x7fELF\x02\x01\x01\x00\x00\x00\x00\x00\x00\x00\x00\x00\x02\x00\xb7\x00:\xff\xff\xff\xff\xff\xff\xff\x00\xff\xff\xff\xff\xff\xff\xff\xff\xfe\xff\xff\xff:/usr/bin/qemu-aarch64-static:F' >"$binfmt/register"
fi
grep -q '^flags: .*F' "$binfmt/qemu-aarch64" || { echo "emulation.sh: qemu-aarch64 is registered without the F flag: containers cannot use it" >&2; exit 1; }
echo "emulation.sh: aarch64 programs run under $(sed -n 's/^interpreter //p' "$binfmt/qemu-aarch64")"
