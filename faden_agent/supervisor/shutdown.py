"""The logind delay inhibitor (docs/service.md, "Shutdown"): held while the agent runs; on
PrepareForShutdown(true), broadcast by logind's own unique name on its path and interface (any
other is ignored), the stream worker reports `node.shutting_down`, ships the last lines and
drains the outbox, then it is released within InhibitDelayMaxSec. Without logind (a container,
a minimal host) open() raises DbusError and the agent goes on."""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable

from faden_agent.ipc import dbuswire as wire
from faden_agent.ipc.dbusconn import BUS_NAME, BUS_PATH, Bus, DbusError, close_fds

log = logging.getLogger(__name__)

LOGIND, LOGIND_PATH, MANAGER = "org.freedesktop.login1", "/org/freedesktop/login1", "org.freedesktop.login1.Manager"
PROPERTIES = "org.freedesktop.DBus.Properties"
OWNER_CHANGED = f"type='signal',sender='{BUS_NAME}',interface='{BUS_NAME}',member='NameOwnerChanged',arg0='{LOGIND}'"
BUS_TIMEOUT_S = 1.0  # each call at start; the supervisor's loop waits for nothing else
DEFAULT_DELAY_MAX_S = 5.0  # logind's own default InhibitDelayMaxSec
RELEASE_MARGIN_S = 0.5  # released this long before logind would stop waiting
WHY = "report the shutdown to the backend and ship the last log lines"


class ShutdownWatch:
    def __init__(self, bus: Bus, delay_max_s: float, logind_owner: str | None = None):
        self.bus = bus
        self.delay_max_s = delay_max_s
        self.fd: int | None = None  # the inhibitor: logind waits until it is closed
        self.logind_owner = logind_owner  # logind's unique name: the only sender believed
        self.ignored = 0  # PrepareForShutdown signals from anyone else, or not broadcast

    @classmethod
    def open(cls, address: str) -> ShutdownWatch:
        """Connect, subscribe to PrepareForShutdown and to logind's owner changes, learn its
        owner and take the inhibitor; DbusError says why not."""
        bus = Bus(address, BUS_TIMEOUT_S)
        try:
            bus.add_match(OWNER_CHANGED)  # before asking the owner: no change falls in between
            bus.add_match(f"type='signal',sender='{LOGIND}',interface='{MANAGER}',member='PrepareForShutdown'")
            watch = cls(bus, delay_max_s(bus), logind_owner(bus))
            watch.take()
        except DbusError:
            bus.close()
            raise
        return watch

    def fileno(self) -> int:
        return self.bus.fileno()

    @property
    def release_after_s(self) -> float:
        """How long after PrepareForShutdown(true) the inhibitor is released at the latest."""
        return max(0.1, self.delay_max_s - RELEASE_MARGIN_S)

    def take(self) -> None:
        if self.fd is not None:
            return
        reply = self.bus.call(
            LOGIND, LOGIND_PATH, MANAGER, "Inhibit", "ssss", ["shutdown", "faden-agent", WHY, "delay"], want_fds=True
        )
        if reply.signature != "h" or not reply.fds:
            close_fds(reply)
            raise DbusError(f"logind's Inhibit answered {reply.signature!r} without an fd")
        self.fd = reply.fds[0]
        for extra in reply.fds[1:]:
            os.close(extra)

    def release(self) -> None:
        if self.fd is not None:
            os.close(self.fd)
            self.fd = None

    def announced(self) -> bool | None:
        """The latest PrepareForShutdown's argument among what came from logind (True: going
        down, False: the shutdown was cancelled); None when none came. DbusError when the bus is gone."""
        latest = None
        for message in self.bus.receive(0):
            close_fds(message)
            if is_owner_change(message):
                self.logind_owner = message.body[2] or None
                log.info("logind's bus name is owned by %s now", self.logind_owner or "nobody")
            elif message.type == wire.SIGNAL and message.member == "PrepareForShutdown":
                if self.from_logind(message):
                    latest = message.body[0]
                else:
                    self.ignored += 1
                    log.warning(
                        "ignored a PrepareForShutdown from %.80s (logind is %s): not logind's broadcast",
                        message.fields.get(wire.SENDER, "?"),
                        self.logind_owner or "not on the bus",
                    )
        return latest

    def from_logind(self, message: wire.Message) -> bool:
        """logind's own broadcast: its unique name, its path and interface, no destination, one boolean."""
        fields = message.fields
        return (
            self.logind_owner is not None
            and fields.get(wire.SENDER) == self.logind_owner
            and fields.get(wire.PATH) == LOGIND_PATH
            and fields.get(wire.INTERFACE) == MANAGER
            and wire.DESTINATION not in fields
            and message.signature == "b"
        )

    def close(self) -> None:
        self.release()
        self.bus.close()


def logind_owner(bus: Bus) -> str:
    """The unique name owning org.freedesktop.login1; DbusError when nobody does."""
    reply = bus.call(BUS_NAME, BUS_PATH, BUS_NAME, "GetNameOwner", "s", [LOGIND])
    if reply.signature != "s" or not reply.body[0].startswith(":"):
        raise DbusError(f"GetNameOwner({LOGIND}) answered {reply.signature[:20]!r}")
    return str(reply.body[0])


def is_owner_change(message: wire.Message) -> bool:
    """The bus daemon's NameOwnerChanged for logind's name (only the daemon sends as org.freedesktop.DBus)."""
    return (
        message.type == wire.SIGNAL
        and message.fields.get(wire.SENDER) == BUS_NAME
        and message.interface == BUS_NAME
        and message.member == "NameOwnerChanged"
        and message.signature == "sss"
        and message.body[0] == LOGIND
    )


def delay_max_s(bus: Bus) -> float:
    """logind's InhibitDelayMaxSec; its default when unreadable."""
    try:
        return logind_delay_s(bus)
    except DbusError as exc:
        log.info("logind's InhibitDelayMaxUSec unreadable (%s): assuming %gs", exc, DEFAULT_DELAY_MAX_S)
        return DEFAULT_DELAY_MAX_S


def logind_delay_s(bus: Bus) -> float:
    """logind's InhibitDelayMaxSec (the property is in microseconds); DbusError when logind does not say."""
    reply = bus.call(LOGIND, LOGIND_PATH, PROPERTIES, "Get", "ss", [MANAGER, "InhibitDelayMaxUSec"])
    value = reply.body[0] if reply.body else None
    if not (isinstance(value, tuple) and value[0] == "t" and isinstance(value[1], int) and value[1] > 0):
        raise DbusError(f"logind's InhibitDelayMaxUSec is {str(value)[:80]}")
    return value[1] / 1e6


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
