"""What tailing one Ray log file needs: its state (Tail), its rotation group from its name,
a line's Ray timestamp, and the per-container read budget. No I/O here."""

from __future__ import annotations

import calendar
import re
import time

from faden_agent.workers.logs.entry import Labels
from faden_agent.workers.logs.labels import core_file_kind
from faden_agent.workers.logs.multiline import Joiner
from faden_agent.workers.logs.sources.ray.fileends import position_key

# x.log, x.out, x.err; rotated away: x.log.N (Python's handler) or x.N.out (spdlog's)
_LOG_NAME = re.compile(r"(?P<stem>.+?)(?:\.(?P<n1>\d{1,6}))?\.(?P<ext>log|out|err)(?:\.(?P<n2>\d{1,6}))?\Z")
MAX_DEBT_S = 10.0  # a container's debt is paid back within this many seconds of its rate
_RAY_TS = re.compile(rb"(?:[A-Z]+ +)?(\d{4})-(\d\d)-(\d\d)[ T](\d\d):(\d\d):(\d\d)(?:[,.](\d{1,9}))?")


def parse_ray_ts_ns(line: bytes) -> int | None:
    match = _RAY_TS.match(line)
    if match is None:
        return None
    parts = [int(g) for g in match.groups()[:6]]
    try:
        seconds = calendar.timegm((*parts, 0, 0, 0))
    except (OverflowError, ValueError):
        return None
    ts_ns = seconds * 1_000_000_000 + int((match[7] or b"").ljust(9, b"0"))
    return ts_ns if 0 <= ts_ns < 2**63 else None  # before 1970 or after 2262: the previous line's


def rotation_of(name: str, core: bool) -> tuple[str, int] | None:
    """(the live file's name, rotation number: 0 live) of a log file name; None when the name
    is not one this directory ships (Serve's: *.log; Ray's own: the kinds labels.py knows)."""
    match = _LOG_NAME.match(name)
    if match is None:
        return None
    if not core and (match["ext"] != "log" or match["n1"]):
        return None if match["ext"] != "log" else (name, 0)  # x.1.log in serve/: a live file
    if core and core_file_kind(name) is None:
        return None
    base = f"{match['stem']}.{match['ext']}"
    if match["n1"] and match["n2"]:
        return None  # x.1.log.2: neither scheme
    return base, int(match["n1"] or match["n2"] or 0)


class ReadBudget:
    """Bytes each container may read now: `rate` per second, at most one second's worth saved.
    Listing its directories is paid from it too (charge): a container in debt is neither read
    nor listed again until the rate has paid the debt back."""

    def __init__(self, rate: int):
        self.rate = rate
        self.left: dict[str, tuple[float, float]] = {}  # container -> (bytes left, when)

    def _now(self, key: str) -> tuple[float, float]:
        now = time.monotonic()
        left, at = self.left.get(key, (self.rate, now))
        return min(self.rate, left + (now - at) * self.rate), now

    def take(self, key: str, want: int, peek: bool = False) -> int:
        """Up to `want` bytes granted now (with peek: how many could be, nothing taken)."""
        left, now = self._now(key)
        if peek:
            return max(0, int(left))
        grant = max(0, int(min(want, left)))
        self.left[key] = (left - grant, now)
        return grant

    def charge(self, key: str, cost: int) -> None:
        """Work already done for the container (a directory listed): may leave it in debt."""
        left, now = self._now(key)
        self.left[key] = (max(left - cost, -MAX_DEBT_S * self.rate), now)

    def refund(self, key: str, unused: int) -> None:
        left, at = self.left[key]
        self.left[key] = (left + unused, at)


class Tail:
    __slots__ = (
        "parts",
        "path",
        "fd",
        "ident",
        "offset",
        "ts_ns",
        "metadata",
        "labels_by_level",
        "joiner",
        "group",
        "pending",
        "at_eof",
        "wd",
        "final",
        "put_offset",
        "seen_size",
        "looked_at",
        "opened_at",
    )

    def __init__(
        self,
        parts: tuple[str, ...],
        path: str,
        fd: int,
        ident: tuple[int, int],
        offset: int,
        ts_ns: int,
        metadata: dict[str, str],
        labels_by_level: dict[str, Labels],
        joiner: Joiner,
        group: str,
        pending: bytes = b"",
        at_eof: bool = False,
        wd: int | None = None,
        final: bool = False,
        put_offset: int = 0,
        seen_size: int = 0,
        looked_at: float = 0.0,
        opened_at: float | None = None,
    ) -> None:
        self.parts = parts  # container, session, "logs", "serve", file name (relative to the root)
        self.path = path
        self.fd = fd
        self.ident = ident
        self.offset = offset
        self.ts_ns = ts_ns
        self.metadata = metadata
        self.labels_by_level = labels_by_level
        self.joiner = joiner
        self.group = group  # the live file's name: its rotation group
        self.pending = pending
        self.at_eof = at_eof
        self.wd = wd  # its inotify watch
        self.final = final  # rotated away: takes no more writes
        self.put_offset = put_offset  # where its position stands once all put into the backlog is accepted
        self.seen_size = seen_size  # its size when last looked at (looked_at): a truncation below it took unread lines
        self.looked_at = looked_at
        self.opened_at: float = time.monotonic() if opened_at is None else opened_at

    @property
    def key(self) -> str:
        return position_key(self.ident)

    @property
    def read_all(self) -> bool:
        """Read to its end, every line of it put into the backlog."""
        return self.at_eof and not self.pending and self.joiner.deadline is None

    @property
    def container(self) -> str:
        return self.parts[0]
