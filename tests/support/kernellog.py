"""The kernel's log as tests write it: a kernel line in a real journal file (JournalWriter), a
/dev/kmsg record ("prio,seq,usec,flags;text" and a dictionary line, usec on this boot's
monotonic clock), and a boot id file in /proc's form for BOOT_ID_FILE."""

from __future__ import annotations

import time
import uuid
from pathlib import Path

from tests.support.journalfiles import JournalWriter


def kernel_line(writer: JournalWriter, text: str) -> None:
    writer.append([writer.entry(text, 3, _TRANSPORT="kernel", SYSLOG_IDENTIFIER="kernel")])


def kmsg_record(seq: int, text: str) -> bytes:
    usec = int(time.clock_gettime(time.CLOCK_MONOTONIC) * 1e6)
    return f"3,{seq},{usec},-;{text}\n SUBSYSTEM=pci\n".encode()


def boot_file(tmp_path: Path, boot: str) -> Path:
    """`boot` (32 hex digits, journald's form) as /proc/sys/kernel/random/boot_id writes it."""
    path = tmp_path / "boot_id"
    path.write_text(str(uuid.UUID(boot)) + "\n")
    return path
