"""The supervisor's side of logind on the system bus: the delay inhibitor it holds, the
PrepareForShutdown signals it believes (logind's own broadcast, from its unique name on its
path and interface; any other is ignored) and logind's InhibitDelayMaxSec. Imported only
where a system bus is there to ask (shutdown.py); DbusError says why something failed.
"""

from __future__ import annotations

import logging
import os

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
