"""The kernel's Xid lines (a KernelLines consumer, kernel/lines.py): `NVRM: Xid (PCI:<bus>):
<code>, pid=<pid>, name=<name>, ...`, "GPU has fallen off the bus" (Xid 79, also the probe-time
"The NVIDIA GPU <bus> ... has fallen off the bus" of a GPU NVML never listed) into the XidLog of
the GPU at that bus id (one never seen there: kept under UNPLACED); NVSwitch `SXid` lines
into the switch's log. A pid a line names is tied to its container while it still runs.
"""

from __future__ import annotations

import re
from collections.abc import Callable

from faden_agent.workers.inventory.gpu.containers import container_of_pid
from faden_agent.workers.inventory.gpu.xids import SWITCH, UNPLACED, XidLog
from faden_agent.workers.inventory.kernel.lines import KernelLine

BUS = r"(?:PCI:)?([0-9A-Fa-f]{1,8}:[0-9A-Fa-f]{1,2}:[0-9A-Fa-f]{1,2})(?:\.[0-9A-Fa-f])?"
XID = re.compile(
    rf"NVRM: Xid \({BUS}\): (\d{{1,6}})(?!\d)(?:, pid=(\d{{1,10}}(?!\d)|'<unknown>'))?(?:, name=([^,]{{0,64}}))?"
)
FALLEN = re.compile(rf"NVRM: GPU (?:at )?{BUS}:? .*fallen off the bus")
PROBE_FALLEN = re.compile(rf"NVRM: The NVIDIA GPU {BUS} .*has fallen off the bus")
SXID = re.compile(rf"SXid \({BUS}\): (\d{{1,6}})(?!\d)")
FATAL = re.compile(r"^, Fatal\b", re.IGNORECASE)  # "..: 20034, Fatal, Link 44 ..." (else Non-fatal)
FALLEN_XID = 79


def bus_key(bus: str | None) -> tuple[int, int, int] | None:
    """ "0000:18:00" and NVML's "00000000:18:00.0" -> (0, 0x18, 0): domain, bus, device."""
    if not isinstance(bus, str) or not bus or len(bus) > 32:
        return None
    parts = bus.split(".")[0].split(":")
    try:
        return (int(parts[-3], 16), int(parts[-2], 16), int(parts[-1], 16)) if len(parts) >= 3 else None
    except ValueError:
        return None


def parse(message: str) -> tuple[str, str, int, dict[str, object]] | None:
    """(event, bus, code, what the line names: pid, process) of a kernel line about a GPU or
    NVSwitch error; None for others."""
    if "NVRM" not in message and "SXid" not in message:
        return None  # nearly every kernel line: one substring test
    if found := XID.search(message):
        pid = found.group(3)
        named: dict[str, object] = {"pid": int(pid)} if pid and pid.isdigit() else {}
        if found.group(4):
            named["process"] = found.group(4).strip()
        return "xid", found.group(1), int(found.group(2)), named
    if found := FALLEN.search(message) or PROBE_FALLEN.search(message):
        return "xid", found.group(1), FALLEN_XID, {}
    if found := SXID.search(message):
        fatal = FATAL.search(message[found.end() :]) is not None
        return "sxid_fatal" if fatal else "sxid", found.group(1), int(found.group(2)), {}
    return None


class KernelXids:
    """The consumer: counts the GPU and NVSwitch lines it read and those of an unseen bus id."""

    name = "gpu-xids"

    def __init__(
        self,
        xids: XidLog,
        uuid_of_bus: Callable[[tuple[int, int, int]], str | None],
        on_change: Callable[[], None],
        container_of: Callable[[int], str | None] = container_of_pid,
    ):
        self.xids = xids
        self.uuid_of_bus = uuid_of_bus
        self.on_change = on_change
        self.container_of = container_of
        self.read = 0  # GPU and NVSwitch lines read
        self.unplaced = 0  # Xid lines whose bus id is no GPU this agent has seen

    def take(self, line: KernelLine) -> None:
        found = parse(line.text)
        if found is None:
            return
        kind, bus, code, named = found
        self.read += 1
        key = bus_key(bus)
        if key is None:
            return
        canonical = f"{key[0]:04x}:{key[1]:02x}:{key[2]:02x}"
        placed = self.uuid_of_bus(key) if kind == "xid" else SWITCH + canonical
        if placed is None:
            self.unplaced += 1
            placed = UNPLACED + canonical
        pid = named.get("pid")
        if isinstance(pid, int) and pid > 0:
            named["container_id"] = self.container_of(pid)  # None once the process is gone
        if self.xids.add(placed, kind, code, line.at, source="kernel", boot=line.boot_id, seq=line.seq, **named):
            self.on_change()
