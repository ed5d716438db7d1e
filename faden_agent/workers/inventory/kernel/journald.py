"""The kernel's lines in the host's journal: `journalctl --follow _TRANSPORT=kernel
_BOOT_ID=<this boot>` as JSON, after a cursor (or from the boot's start). A journal is there
when journalctl is and a journal file can be read (`journal_problem` says why not); a cursor
journald would refuse (its form) is not passed, and one journalctl fails to seek to is dropped.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import orjson

from faden_agent.node.journalctl import journalctl_argv

MAX_LINE = 64 * 1024  # one journalctl JSON line; a longer one is skipped
SYSTEM_JOURNALS = (Path("/var/log/journal"), Path("/run/log/journal"))
CURSOR = re.compile(
    r"^s=[0-9a-f]{32};i=[0-9a-f]{1,16};b=[0-9a-f]{32};m=[0-9a-f]{1,16};t=[0-9a-f]{1,16};x=[0-9a-f]{1,16}$"
)
MAX_FILES_LOOKED_AT = 256


def usable_cursor(cursor: str | None) -> bool:
    return isinstance(cursor, str) and len(cursor) <= 200 and CURSOR.match(cursor) is not None


def journal_problem(directory: Path | None) -> str | None:
    """Why the host's journal cannot be read here (None: it can): no journalctl, no journal
    file, none this user may read."""
    if shutil.which("journalctl") is None:
        return "journalctl not found"
    places = [directory] if directory is not None else list(SYSTEM_JOURNALS)
    found = readable = 0
    for place in places:
        for path in _journal_files(place):
            found += 1
            readable += os.access(path, os.R_OK)
            if readable:
                return None
    where = " or ".join(str(p) for p in places)
    return f"journal files in {where} not readable by this user" if found else f"no journal files in {where}"


def _journal_files(place: Path) -> Iterator[Path]:
    """*.journal files in `place` and its subdirectories (a machine id's), a bounded number."""
    looked = 0
    for root, dirs, files in os.walk(place):
        if root.count(os.sep) - str(place).count(os.sep) >= 1:
            dirs[:] = []
        for name in files:
            looked += 1
            if looked > MAX_FILES_LOOKED_AT:
                return
            if name.endswith((".journal", ".journal~")):
                yield Path(root, name)


def argv(directory: Path | None, boot_id: str | None, cursor: str | None) -> list[str]:
    options = ["--follow", "--all", "--output=json", "--no-pager", "--lines=all"]
    # _BOOT_ID is in every entry's head whatever is asked for (journald/source.py ALWAYS_WRITTEN)
    options += ["--output-fields=MESSAGE,PRIORITY", "_TRANSPORT=kernel"]
    if boot_id:
        options.append(f"_BOOT_ID={boot_id}")  # a line of an earlier boot: the reboot was its remedy
    return journalctl_argv(options, directory, cursor if usable_cursor(cursor) else None, None)


def follow(
    command: list[str], stopped: Callable[[], bool], started: Callable[[subprocess.Popen[bytes]], None]
) -> Iterator[dict[str, Any]]:
    """The journal entries journalctl prints (objects only), until it ends or `stopped()`;
    raises JournalEnded with its exit status and last words when it ended on its own."""
    proc = subprocess.Popen(command, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    started(proc)
    assert proc.stdout is not None and proc.stderr is not None  # both PIPE
    entries = 0
    try:
        while not stopped():
            line = proc.stdout.readline(MAX_LINE)
            if not line:
                break
            if not line.endswith(b"\n"):  # over MAX_LINE: skip the rest of it
                while (rest := proc.stdout.readline(MAX_LINE)) and not rest.endswith(b"\n"):
                    pass
                continue
            try:
                entry = orjson.loads(line)
            except orjson.JSONDecodeError:
                continue
            if isinstance(entry, dict):
                entries += 1
                yield entry
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait()
        said = proc.stderr.read(2000).decode(errors="replace").strip().splitlines()
        proc.stdout.close()
        proc.stderr.close()
    if not stopped():
        raise JournalEnded(proc.returncode, said[-1][:300] if said else "", entries)


class JournalEnded(Exception):
    def __init__(self, status: int, said: str, entries: int):
        super().__init__(f"journalctl exited with {status}" + (f": {said}" if said else ""))
        self.status = status
        self.entries = entries


def message_text(entry: dict[str, Any]) -> str | None:
    """MESSAGE as text (journalctl writes a non-UTF-8 one as a byte array)."""
    message = entry.get("MESSAGE")
    if isinstance(message, list):
        return bytes(b for b in message[:MAX_LINE] if isinstance(b, int) and 0 <= b < 256).decode(errors="replace")
    return message if isinstance(message, str) else None
