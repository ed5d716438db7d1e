"""The logind delay inhibitor (docs/service.md, "Shutdown"): held while the agent runs; on
PrepareForShutdown(true), broadcast by logind (logind.py), the stream worker reports
`node.shutting_down`, ships the last lines and drains the outbox, then it is released within
InhibitDelayMaxSec. Without a system bus or logind (a container, a minimal host) the agent goes
on; the D-Bus code is loaded only where a bus socket is there."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

from faden_agent.ipc.dbusaddress import bus_socket_missing

if TYPE_CHECKING:
    from faden_agent.supervisor.logind import ShutdownWatch

log = logging.getLogger(__name__)


class ShutdownDelay:
    """What the supervisor's loop asks of the shutdown watch (arbiter.py): the bus fd for its
    poller, a PrepareForShutdown handled when it is readable, the release when the stream
    worker says it is done (its status `shutdown: "ready"`) or at the latest in time."""

    def __init__(self, watch: ShutdownWatch | None, tell_stream: Callable[[str, dict[str, float]], None]):
        self.watch = watch
        self.tell_stream = tell_stream
        self.release_at: float | None = None  # time.monotonic(); set while a shutdown waits on us
        self.announced_at: float | None = None

    @classmethod
    def start(cls, address: str, tell_stream: Callable[[str, dict[str, float]], None]) -> ShutdownDelay:
        missing = bus_socket_missing(address)
        if missing is not None:  # no bus: the D-Bus modules are never loaded
            log.info("no logind shutdown inhibitor (%s): a shutdown is not delayed to report it", missing)
            return cls(None, tell_stream)
        from faden_agent.ipc.dbusconn import DbusError
        from faden_agent.supervisor.logind import ShutdownWatch

        try:
            watch = ShutdownWatch.open(address)
        except DbusError as exc:
            log.info("no logind shutdown inhibitor (%s): a shutdown is not delayed to report it", exc)
            return cls(None, tell_stream)
        log.info("holding a logind delay inhibitor (InhibitDelayMaxSec %gs)", watch.delay_max_s)
        return cls(watch, tell_stream)

    @property
    def fileno(self) -> int | None:
        return self.watch.fileno() if self.watch is not None else None

    @property
    def waiting(self) -> bool:
        """A shutdown waits for the inhibitor: the stream worker's status matters now."""
        return self.release_at is not None

    def on_bus(self) -> None:
        from faden_agent.ipc.dbusconn import DbusError  # loaded with the watch

        assert self.watch is not None
        try:
            announced = self.watch.announced()
            if announced is False and (self.release_at is not None or self.watch.fd is None):
                log.warning("the shutdown was cancelled: holding the inhibitor again")
                self.release_at = None
                self.watch.take()
                self.tell_stream("shutdown_cancelled", {})
        except DbusError as exc:
            log.warning("the system bus connection failed (%s): a shutdown is no longer delayed", exc)
            self.close()
            return
        if announced and self.release_at is None and self.watch.fd is not None:
            now = time.monotonic()
            self.announced_at = now
            self.release_at = now + self.watch.release_after_s
            log.warning(
                "the machine is shutting down: reporting it (inhibitor released within %.1fs)", self.release_at - now
            )
            self.tell_stream("shutting_down", {"until_mono": self.release_at})

    def release_when_done(self, stream_status: dict[str, object] | None) -> None:
        if self.release_at is None or self.watch is None or self.watch.fd is None:
            return
        ready = (stream_status or {}).get("shutdown") == "ready"
        if ready or time.monotonic() >= self.release_at:
            self.watch.release()
            took = time.monotonic() - (self.announced_at or 0.0)
            log.warning(
                "shutdown inhibitor released after %.2fs (%s)",
                took,
                "reported, lines shipped, outbox empty" if ready else "time is up; not everything was sent",
            )

    def due(self) -> float | None:
        return self.release_at if self.watch is not None and self.watch.fd is not None else None

    def close(self) -> None:
        if self.watch is not None:
            self.watch.close()
            self.watch = None

    def forget_in_child(self) -> None:
        """In a forked worker: close the inherited inhibitor and bus socket (a copy left open
        would hold the shutdown until logind's own timeout)."""
        self.close()
