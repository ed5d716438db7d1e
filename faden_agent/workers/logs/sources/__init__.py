"""Log sources: each reads one kind of log in its own thread and feeds the backlog.

A source resumes from the positions Loki accepted, gives every line its own timestamp
(so what it reads again after a crash is an exact duplicate), and blocks when the backlog
is full rather than holding lines itself.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, NamedTuple

from faden_agent.common.errorline import error_line
from faden_agent.config import Config
from faden_agent.workers.logs.backlog import Backlog
from faden_agent.workers.logs.labels import LabelMaker
from faden_agent.workers.logs.positions import Positions
from faden_agent.workers.logs.report import report_event

if TYPE_CHECKING:
    from faden_agent.protocol.status import SourceStatus

# With no stored position a source starts this far back, not at the start of history.
FIRST_START_WINDOW_S = 3600
RETRY_S = 5.0  # pause before a failed reader starts again
ROTATED_BEFORE_READ = "rotated_before_read"  # a loss reason: gone (vacuumed, rotated away) before it was read
LOSS_REPORT_S = 60.0  # losses found more often are summed into one event per reason this often


class Kind(NamedTuple):
    """A source's wire kind (its status, counts and loss events say `source: <name>`) and the
    prefix of its stored position keys: both stay as they are, stated here only."""

    name: str
    key_prefix: str  # a key is "<key_prefix>" or "<key_prefix>:..."


JOURNALD = Kind("journal", "journal")
CONTAINERS = Kind("containers", "container")  # keys "container:<id>:<stream>"
RAY = Kind("ray-serve", "file")  # keys "file:<device>:<inode>"
CAPTURES = Kind("captures", "capture")  # keys "capture:<id>" (node/captures.py)
# The source (kind) of an entry's position key: what the shipper's counts are kept per.
KIND_OF_KEY = {kind.key_prefix: kind.name for kind in (JOURNALD, CONTAINERS, RAY, CAPTURES)}


def source_kind(key: str) -> str:
    return KIND_OF_KEY.get(key.split(":", 1)[0], "other")


log = logging.getLogger(__name__)


class Shared(NamedTuple):
    """What the worker gives every source: the settings, the backlog it feeds, the positions it
    resumes from, the label maker, the worker's stop event and its thread starter."""

    config: Config
    backlog: Backlog
    positions: Positions
    labels: LabelMaker
    stop_event: threading.Event
    start_thread: Callable[..., threading.Thread]  # the worker's supervised starter (workers/threads.py)


class Source:
    def __init__(self, shared: Shared) -> None:
        self.name = f"logs-{self.kind}"
        self.config = shared.config
        self.backlog = shared.backlog
        self.positions = shared.positions
        self.labels = shared.labels
        self.stop_event = shared.stop_event
        self.lines_read = 0  # every line accounted for: taken into the backlog, or known lost
        self.lines_lost = 0
        self._unreported: dict[tuple[str, bool], int] = {}  # (reason, at_least) -> lines
        self._reported_at = -LOSS_REPORT_S  # the first loss is reported at once
        self._loss_lock = threading.Lock()  # readers count, the worker's loop reports
        self.last_error = ""
        self.start_thread = shared.start_thread  # for the reader, and for threads of its own
        self.thread: threading.Thread | None = None

    kind = "source"

    def start(self) -> None:
        """Run the reader on a thread of its own."""
        self.thread = self.start_thread(self.name, self.run)

    def run(self) -> None:
        while not self.stop_event.is_set():
            try:
                self.follow()
            except Exception as exc:  # noqa: BLE001 - a reader must never take the worker down
                error = error_line(exc, 300, named=True)
                if error != self.last_error:  # once per distinct failure, not every retry
                    log.error("logs: %s reader failed (%s); retrying every %gs", self.kind, error, RETRY_S)
                self.last_error = error
            self.stop_event.wait(RETRY_S)

    def follow(self) -> None:
        """Read until stopped (or until a failure worth a restart of this reader)."""
        raise NotImplementedError

    def check(self) -> None:
        """Called from the worker's loop every tick: a quick, non-blocking health check."""
        self.report_losses()

    def lost(self, count: int, reason: str, at_least: bool = False) -> None:
        """Lines of this source that were gone before they were read (`reason`, e.g.
        rotated_before_read): counted in lines_read and lines_lost, and reported as a
        logs.lines_lost event (at most one per reason every LOSS_REPORT_S)."""
        log.warning("logs: %s: %s%d lines %s", self.kind, "at least " if at_least else "", count, reason)
        with self._loss_lock:
            self.lines_read += count
            self.lines_lost += count
            self._unreported[(reason, at_least)] = self._unreported.get((reason, at_least), 0) + count
        self.report_losses()

    def report_losses(self) -> None:
        with self._loss_lock:
            if not self._unreported or time.monotonic() - self._reported_at < LOSS_REPORT_S:
                return
            self._reported_at = time.monotonic()
            due, self._unreported = self._unreported, {}
        for (reason, at_least), count in due.items():
            event = {
                "type": "logs.lines_lost",
                "source": self.kind,
                "count": count,
                "at_least": at_least,
                "reason": reason,
                "message": f"{self.kind}: {'at least ' if at_least else ''}{count} log lines {reason}",
            }
            if not report_event(self.config, event):  # kept for the next report
                with self._loss_lock:
                    self._unreported[(reason, at_least)] = self._unreported.get((reason, at_least), 0) + count

    def stop(self) -> None:
        """Release what the reader holds (child processes, connections); must not block."""

    def status(self) -> SourceStatus:
        return {"lines_read": self.lines_read, "lines_lost": self.lines_lost, "last_error": self.last_error}
