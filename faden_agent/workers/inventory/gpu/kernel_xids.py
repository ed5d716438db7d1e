"""The kernel's own Xid lines: `journalctl --follow _TRANSPORT=kernel _BOOT_ID=<this boot>`
after a durable cursor (kept in gpu-evidence.json), so Xids raised while the agent was down
are read at start. `NVRM: Xid (PCI:<bus>): <code>, ...` and "GPU has fallen off the bus"
(Xid 79) go into the GPU's XidLog by bus id; NVSwitch `SXid` lines into the switch's log.
"""

from __future__ import annotations

import logging
import re
import subprocess
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import orjson

from faden_agent.node.journalctl import journalctl_argv
from faden_agent.workers.inventory.gpu.xids import XidLog

log = logging.getLogger(__name__)

MAX_LINE = 64 * 1024  # one journalctl JSON line; a longer one is skipped
RESTART_S = 10.0  # journalctl ended: follow again after this
BOOT_ID = Path("/proc/sys/kernel/random/boot_id")
XID = re.compile(r"NVRM: Xid \((?:PCI:)?([0-9A-Fa-f]+:[0-9A-Fa-f]+:[0-9A-Fa-f]+)(?:\.[0-9A-Fa-f])?\): (\d+)")
FALLEN = re.compile(r"NVRM: GPU (?:at )?(?:PCI:)?([0-9A-Fa-f]+:[0-9A-Fa-f]+:[0-9A-Fa-f]+)\S*:? .*fallen off the bus")
SXID = re.compile(r"SXid \((?:PCI:)?([0-9A-Fa-f]+:[0-9A-Fa-f]+:[0-9A-Fa-f]+)(?:\.[0-9A-Fa-f])?\): (\d+)")
FATAL = re.compile(r"^, Fatal\b", re.IGNORECASE)  # "..: 20034, Fatal, Link 44 ..." (else Non-fatal)
FALLEN_XID = 79


def bus_key(bus: str | None) -> tuple[int, int, int] | None:
    """ "0000:18:00" and NVML's "00000000:18:00.0" -> (0, 0x18, 0): domain, bus, device."""
    if not bus:
        return None
    parts = bus.split(".")[0].split(":")
    try:
        return (int(parts[-3], 16), int(parts[-2], 16), int(parts[-1], 16)) if len(parts) >= 3 else None
    except ValueError:
        return None


def parse(message: str) -> tuple[str, str, int] | None:
    """(event, bus, code) of a kernel line about a GPU or NVSwitch error; None for others."""
    if "NVRM" not in message and "SXid" not in message:
        return None  # nearly every kernel line: one substring test
    if found := XID.search(message):
        return "xid", found.group(1), int(found.group(2))
    if found := FALLEN.search(message):
        return "xid", found.group(1), FALLEN_XID
    if found := SXID.search(message):
        fatal = FATAL.search(message[found.end() :]) is not None
        return "sxid_fatal" if fatal else "sxid", found.group(1), int(found.group(2))
    return None


def this_boot() -> str | None:
    try:
        return BOOT_ID.read_text().strip().replace("-", "") or None
    except OSError:
        return None


class KernelXidReader:
    """Follows the kernel transport; `cursor` is the last entry read (saved by the caller)."""

    def __init__(
        self,
        xids: XidLog,
        uuid_of_bus: Callable[[tuple[int, int, int]], str | None],
        on_change: Callable[[], None],
        stop_event: threading.Event,
        cursor: str | None = None,
        journal_directory: Path | None = None,
        first_window_s: float = 3600.0,
        boot_id: str | None = None,
    ):
        self.xids = xids
        self.uuid_of_bus = uuid_of_bus
        self.on_change = on_change
        self.stop_event = stop_event
        self.cursor = cursor
        self.journal_directory = journal_directory
        self.first_window_s = first_window_s  # no cursor yet: this far back (the Xid hold)
        self.boot_id = boot_id or this_boot()
        self.proc: subprocess.Popen[bytes] | None = None
        self.read = 0  # GPU and NVSwitch lines read
        self.unplaced = 0  # Xid lines whose bus id is no GPU this agent has seen
        self.last_error: str | None = None

    def argv(self) -> list[str]:
        options = ["--follow", "--all", "--output=json", "--no-pager", "--lines=all"]
        options += ["--output-fields=MESSAGE", "_TRANSPORT=kernel"]
        if self.boot_id:
            options.append(f"_BOOT_ID={self.boot_id}")  # a reboot is the fix of a reboot-needed Xid
        since = time.time() - self.first_window_s
        return journalctl_argv(options, self.journal_directory, self.cursor, since)

    def run(self) -> None:
        """Follow until stopped; journalctl ending (or missing) is retried every RESTART_S."""
        while not self.stop_event.is_set():
            try:
                self._follow()
            except OSError as exc:  # no journalctl: nothing to read, said once in status
                self.last_error = f"journalctl: {exc}"[:300]
            self.stop_event.wait(RESTART_S)

    def stop(self) -> None:
        self.stop_event.set()
        proc = self.proc
        if proc is not None and proc.poll() is None:
            proc.kill()

    def _follow(self) -> None:
        self.proc = proc = subprocess.Popen(
            self.argv(), stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL
        )
        assert proc.stdout is not None  # stdout=PIPE
        try:
            while not self.stop_event.is_set():
                line = proc.stdout.readline(MAX_LINE)
                if not line:
                    break
                if line.endswith(b"\n"):
                    self.take(line)
                else:  # over MAX_LINE: skip the rest of it
                    while (rest := proc.stdout.readline(MAX_LINE)) and not rest.endswith(b"\n"):
                        pass
        finally:
            if proc.poll() is None:
                proc.kill()
            proc.wait()
            proc.stdout.close()
            if proc.returncode not in (0, -9) and not self.stop_event.is_set():
                self.last_error = f"journalctl exited with {proc.returncode}"

    def take(self, line: bytes) -> None:
        """One journalctl JSON entry: an Xid into the log (a verdict's news wakes the probe)."""
        try:
            entry = orjson.loads(line)
        except orjson.JSONDecodeError:
            return
        if not isinstance(entry, dict):
            return
        message = entry.get("MESSAGE")
        if isinstance(message, list):  # not UTF-8: journalctl's byte array
            message = bytes(b for b in message if isinstance(b, int) and 0 <= b < 256).decode(errors="replace")
        found = parse(message) if isinstance(message, str) else None
        if found is not None:
            self._log(found, _realtime(entry))
        if isinstance(entry.get("__CURSOR"), str):
            self.cursor = entry["__CURSOR"]

    def _log(self, found: tuple[str, str, int], at: float) -> None:
        kind, bus, code = found
        self.read += 1
        key = bus_key(bus)
        uuid: str | None = f"nvswitch:{bus}" if kind.startswith("sxid") else self.uuid_of_bus(key) if key else None
        if uuid is None:
            self.unplaced += 1
            return
        if self.xids.add(uuid, kind, code, at, source="kernel"):
            self.on_change()


def _realtime(entry: dict[str, Any]) -> float:
    raw = entry.get("__REALTIME_TIMESTAMP")
    try:
        return int(raw) / 1e6 if isinstance(raw, str) else time.time()
    except ValueError:
        return time.time()
