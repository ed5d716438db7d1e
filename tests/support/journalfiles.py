"""Real journal files for tests, without a running journald.

Entries are written in journald's export format and turned into a journal file by
`systemd-journal-remote -o DIR/NAME.journal FILE.export`. Running it again on the same
output file APPENDS to it, and `journalctl --directory=DIR --follow` sees the new entries
(checked on systemd 252), which is how tests append while the shipper follows.

Every entry gets __REALTIME_TIMESTAMP, __MONOTONIC_TIMESTAMP and _BOOT_ID (journal-remote
needs all three); values with a newline or bytes that are not UTF-8 use the export
format's binary form (NAME, newline, little-endian 64-bit length, data, newline).
"""

from __future__ import annotations

import struct
import subprocess
import time
import uuid
from pathlib import Path

JOURNAL_REMOTE = "/lib/systemd/systemd-journal-remote"


def export_field(name: str, value: str | bytes) -> bytes:
    data = value.encode() if isinstance(value, str) else value
    try:
        text_ok = b"\n" not in data and data.decode("utf-8") is not None
    except UnicodeDecodeError:
        text_ok = False
    if text_ok:
        return name.encode() + b"=" + data + b"\n"
    return name.encode() + b"\n" + struct.pack("<Q", len(data)) + data + b"\n"


class JournalWriter:
    """One journal file in `directory`; `append` adds entries to it (creating it first)."""

    def __init__(self, directory: Path, name: str = "test.journal"):
        self.directory = Path(directory)
        self.directory.mkdir(parents=True, exist_ok=True)
        self.path = self.directory / name
        self.boot_id = uuid.uuid4().hex
        self.monotonic_us = 1_000_000
        self.last_realtime_us = 0
        self._exports = 0

    def entry(
        self,
        message: str | bytes | None,
        priority: int | None = 6,
        realtime_us: int | None = None,
        **fields: str | bytes,
    ) -> dict[str, str | bytes]:
        """An entry; realtime defaults to now (strictly increasing within this writer)."""
        if realtime_us is None:
            realtime_us = max(time.time_ns() // 1000, self.last_realtime_us + 1)
        self.last_realtime_us = max(self.last_realtime_us, realtime_us)
        self.monotonic_us += 1
        entry: dict[str, str | bytes] = {
            "__REALTIME_TIMESTAMP": str(realtime_us),
            "__MONOTONIC_TIMESTAMP": str(self.monotonic_us),
            "_BOOT_ID": self.boot_id,
        }
        if message is not None:
            entry["MESSAGE"] = message
        if priority is not None:
            entry["PRIORITY"] = str(priority)
        entry.update(fields)
        return entry

    def append(self, entries: list[dict[str, str | bytes]]) -> None:
        self._exports += 1
        export = self.directory.parent / f".{self.path.name}.{self._exports}.export"
        with open(export, "wb") as fh:
            for entry in entries:
                fh.write(b"".join(export_field(k, v) for k, v in entry.items()) + b"\n")
        try:
            done = subprocess.run(
                [JOURNAL_REMOTE, "-o", str(self.path), str(export)], capture_output=True, text=True, timeout=120
            )
        finally:
            export.unlink()
        if done.returncode != 0:
            raise RuntimeError(f"systemd-journal-remote failed ({done.returncode}): {done.stderr.strip()}")

    def lines(self, messages: list[str], priority: int = 6, **fields: str) -> list[dict[str, str | bytes]]:
        return [self.entry(m, priority, **fields) for m in messages]
