"""systemd's notify protocol, spoken directly: one datagram to $NOTIFY_SOCKET.

READY=1 once the workers run, WATCHDOG=1 from the supervisor loop while healthy, STOPPING=1
on shutdown, STATUS= for `systemctl status`; a no-op outside systemd. Made from the process
environment, it takes the variables out of it (NotifyAccess=main): workers never inherit them.
"""

from __future__ import annotations

import os
import socket
from collections.abc import Mapping

from faden_agent.common.proctitle import unset_environ

NOTIFY_VARIABLES = ("NOTIFY_SOCKET", "WATCHDOG_USEC", "WATCHDOG_PID")


class SystemdNotifier:
    def __init__(self, environ: Mapping[str, str] | None = None):
        env = dict(os.environ) if environ is None else environ
        if environ is None:  # NotifyAccess=main: only this process may speak to systemd
            unset_environ(*NOTIFY_VARIABLES)
        address = env.get("NOTIFY_SOCKET") or None
        if address and address.startswith("@"):
            address = "\0" + address[1:]  # abstract namespace
        self.address = address
        usec = env.get("WATCHDOG_USEC", "")
        pid = env.get("WATCHDOG_PID", "")
        watchdog_for_us = usec.isdigit() and int(usec) > 0 and (not pid or pid == str(os.getpid()))
        # Pet twice per period, as sd_watchdog_enabled(3) advises.
        self.watchdog_interval_s = int(usec) / 1e6 / 2 if watchdog_for_us else None

    @property
    def enabled(self) -> bool:
        return self.address is not None

    def send(self, *fields: str) -> bool:
        if not self.address:
            return False
        try:
            with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM | socket.SOCK_CLOEXEC) as sock:
                sock.sendto("\n".join(fields).encode(), self.address)
            return True
        except OSError:
            return False

    def ready(self, status: str = "") -> bool:
        return self.send("READY=1", f"STATUS={status}") if status else self.send("READY=1")

    def watchdog(self) -> bool:
        return self.send("WATCHDOG=1")

    def stopping(self) -> bool:
        return self.send("STOPPING=1")

    def status(self, text: str) -> bool:
        return self.send(f"STATUS={text}")
