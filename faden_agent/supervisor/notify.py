"""systemd's notify protocol, spoken directly: one datagram to $NOTIFY_SOCKET.

READY=1 once the workers run, WATCHDOG=1 from the supervisor loop while it is healthy,
STOPPING=1 on shutdown, STATUS= for `systemctl status`. A no-op outside systemd.

Under the standalone binary, systemd's main process is PyInstaller's onefile bootloader
and these messages come from its child (the unit has NotifyAccess=all); WATCHDOG_PID then
names the bootloader, our parent, and is accepted as ours.
"""

from __future__ import annotations

import os
import socket
from typing import Mapping

from faden_agent.supervisor.onefile import is_onefile_child


class SystemdNotifier:
    def __init__(self, environ: Mapping[str, str] | None = None, onefile_child: bool | None = None):
        env = os.environ if environ is None else environ
        address = env.get("NOTIFY_SOCKET") or None
        if address and address.startswith("@"):
            address = "\0" + address[1:]  # abstract namespace
        self.address = address
        self.onefile_child = is_onefile_child() if onefile_child is None else onefile_child
        usec = env.get("WATCHDOG_USEC", "")
        pid = env.get("WATCHDOG_PID", "")
        ours = {str(os.getpid())} | ({str(os.getppid())} if self.onefile_child else set())
        watchdog_for_us = usec.isdigit() and int(usec) > 0 and (not pid or pid in ours)
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
