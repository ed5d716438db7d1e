"""The supervisor's side of logind on the system bus: the delay inhibitor it holds, the
PrepareForShutdown signals it reads and logind's InhibitDelayMaxSec. Imported only where a
system bus is there to ask (shutdown.py); DbusError says why something failed.
"""

from __future__ import annotations

import logging
import os

from faden_agent.ipc import dbuswire as wire
from faden_agent.ipc.dbusconn import Bus, DbusError, close_fds

log = logging.getLogger(__name__)

LOGIND, LOGIND_PATH, MANAGER = "org.freedesktop.login1", "/org/freedesktop/login1", "org.freedesktop.login1.Manager"
PROPERTIES = "org.freedesktop.DBus.Properties"
BUS_TIMEOUT_S = 1.0  # each call at start; the supervisor's loop waits for nothing else
DEFAULT_DELAY_MAX_S = 5.0  # logind's own default InhibitDelayMaxSec
RELEASE_MARGIN_S = 0.5  # released this long before logind would stop waiting
WHY = "report the shutdown to the backend and ship the last log lines"


class ShutdownWatch:
    def __init__(self, bus: Bus, delay_max_s: float):
        self.bus = bus
        self.delay_max_s = delay_max_s
        self.fd: int | None = None  # the inhibitor: logind waits until it is closed

    @classmethod
    def open(cls, address: str) -> ShutdownWatch:
        """Connect, subscribe to PrepareForShutdown and take the inhibitor; DbusError says why not."""
        bus = Bus(address, BUS_TIMEOUT_S)
        try:
            bus.add_match(f"type='signal',sender='{LOGIND}',interface='{MANAGER}',member='PrepareForShutdown'")
            watch = cls(bus, delay_max_s(bus))
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
            LOGIND, LOGIND_PATH, MANAGER, "Inhibit", "ssss", ["shutdown", "faden-agent", WHY, "delay"]
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
        """The latest PrepareForShutdown's argument among what came (True: going down, False:
        the shutdown was cancelled); None when none came. DbusError when the bus is gone."""
        latest = None
        for message in self.bus.receive(0):
            close_fds(message)
            if message.type == wire.SIGNAL and message.member == "PrepareForShutdown" and message.body:
                latest = bool(message.body[0])
        return latest

    def close(self) -> None:
        self.release()
        self.bus.close()


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
