"""Log sources: each reads one kind of log in its own thread and feeds the backlog.

A source resumes from the positions Loki accepted, gives every line its own timestamp
(so what it reads again after a crash is an exact duplicate), and blocks when the backlog
is full rather than holding lines itself.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

from faden_agent.config import Config
from faden_agent.errorline import error_line
from faden_agent.workers.logs.backlog import Backlog
from faden_agent.workers.logs.labels import LabelMaker
from faden_agent.workers.logs.positions import Positions
from faden_agent.workers.threads import start_daemon

# With no stored position a source starts this far back, not at the start of history.
FIRST_START_WINDOW_S = 3600
RETRY_S = 5.0  # pause before a failed reader starts again

log = logging.getLogger(__name__)


class Source:
    def __init__(
        self, config: Config, backlog: Backlog, positions: Positions, labels: LabelMaker, stop_event: threading.Event
    ):
        self.name = f"logs-{self.kind}"
        self.config = config
        self.backlog = backlog
        self.positions = positions
        self.labels = labels
        self.stop_event = stop_event
        self.lines_read = 0
        self.last_error = ""
        self.start_thread: Callable[..., threading.Thread] = start_daemon
        self.thread: threading.Thread | None = None

    kind = "source"

    def start(self, start_thread: Callable[..., threading.Thread] = start_daemon) -> None:
        """Run the reader on a thread; the worker passes its supervised starter (which the
        reader also uses for threads of its own)."""
        self.start_thread = start_thread
        self.thread = start_thread(self.name, self.run)

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

    def stop(self) -> None:
        """Release what the reader holds (child processes, connections); must not block."""

    def status(self) -> dict[str, object]:
        return {"lines_read": self.lines_read, "last_error": self.last_error}
