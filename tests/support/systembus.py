"""A private system bus for tests (the real dbus-daemon from Debian's `dbus`, a config of its own
on a temp socket) and a stand-in logind on it: org.freedesktop.login1's Inhibit (a pipe's write
end passed over SCM_RIGHTS; the read end tells when every copy is closed), the
InhibitDelayMaxUSec property, and PrepareForShutdown signals sent on demand. Fixture
`system_bus` (import it into the test module): (PrivateSystemBus, StandInLogind) started."""

from __future__ import annotations

import os
import queue
import select
import shutil
import subprocess
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

from faden_agent.ipc import dbuswire as wire
from faden_agent.ipc.dbusconn import Bus, DbusError
from tests.support.agentproc import wait_for

CONFIG = """<!DOCTYPE busconfig PUBLIC "-//freedesktop//DTD D-BUS Bus Configuration 1.0//EN"
 "http://www.freedesktop.org/standards/dbus/1.0/busconfig.dtd">
<busconfig>
  <type>system</type>
  <listen>unix:path={path}</listen>
  <auth>EXTERNAL</auth>
  <policy context="default">
    <allow user="*"/>
    <allow own="*"/>
    <allow send_type="method_call"/>
    <allow send_type="method_return"/>
    <allow send_type="signal"/>
    <allow send_type="error"/>
    <allow receive_type="method_call"/>
    <allow receive_type="method_return"/>
    <allow receive_type="signal"/>
    <allow receive_type="error"/>
  </policy>
</busconfig>
"""
LOGIND, LOGIND_PATH, MANAGER = "org.freedesktop.login1", "/org/freedesktop/login1", "org.freedesktop.login1.Manager"


class PrivateSystemBus:
    def __init__(self, root: Path):
        self.root = root
        self.socket = root / "system_bus_socket"
        self.proc: subprocess.Popen | None = None

    @property
    def address(self) -> str:
        return f"unix:path={self.socket}"

    def start(self) -> PrivateSystemBus:
        daemon = shutil.which("dbus-daemon")
        if daemon is None:
            raise RuntimeError("dbus-daemon is missing: apt-get install dbus (tests/infra/start-services.sh)")
        self.root.mkdir(parents=True, exist_ok=True)
        config = self.root / "bus.conf"
        config.write_text(CONFIG.format(path=self.socket))
        self.proc = subprocess.Popen(
            [daemon, f"--config-file={config}", "--nofork", "--nopidfile"],
            stdout=subprocess.DEVNULL,
            stderr=open(self.root / "bus.log", "wb"),  # noqa: SIM115 - the daemon's for its life
        )
        wait_for(self.socket.exists, 10, what="the private bus socket")
        return self

    def stop(self) -> None:
        if self.proc is not None:
            self.proc.terminate()
            self.proc.wait(10)


@dataclass
class Inhibitor:
    what: str
    who: str
    why: str
    mode: str
    read_end: int
    taken_at: float
    released_at: float | None = None


class StandInLogind(threading.Thread):
    def __init__(self, address: str, delay_max_s: float = 5.0):
        super().__init__(name="standin-logind", daemon=True)
        self.bus = Bus(address)
        self.bus.call(
            "org.freedesktop.DBus", "/org/freedesktop/DBus", "org.freedesktop.DBus", "RequestName", "su", [LOGIND, 4]
        )
        self.delay_max_s = delay_max_s
        self.inhibitors: list[Inhibitor] = []
        self.signals_sent: list[tuple[bool, float]] = []
        self._asks: queue.Queue[bool] = queue.Queue()
        self._halt = threading.Event()

    def prepare_for_shutdown(self, active: bool) -> None:
        self._asks.put(active)

    def run(self) -> None:
        while not self._halt.is_set():
            while not self._asks.empty():
                active = self._asks.get()
                self.bus.signal(LOGIND_PATH, MANAGER, "PrepareForShutdown", "b", [active])
                self.signals_sent.append((active, time.time()))
            try:
                messages = self.bus.receive(0.05)
            except DbusError:  # the bus went away first
                return
            for message in messages:
                if message.type == wire.METHOD_CALL:
                    self._answer(message)
            self._watch_releases()

    def _answer(self, call: wire.Message) -> None:
        if call.member == "Inhibit" and call.interface == MANAGER:
            read_end, write_end = os.pipe()
            self.inhibitors.append(Inhibitor(*call.body, read_end=read_end, taken_at=time.time()))
            self.bus.reply(call, "h", [0], fds=[write_end])
            os.close(write_end)  # the agent's copy is the last one
        elif call.member == "Get" and call.body[1:] == ["InhibitDelayMaxUSec"]:
            self.bus.reply(call, "v", [("t", int(self.delay_max_s * 1_000_000))])
        else:
            fields = {
                wire.REPLY_SERIAL: call.serial,
                wire.DESTINATION: call.fields.get(wire.SENDER),
                wire.ERROR_NAME: "org.freedesktop.DBus.Error.UnknownMethod",
                wire.SIGNATURE: "s",
            }
            self.bus.send(wire.Message(wire.ERROR, fields=fields, body=[f"no {call.member} here"]))

    def _watch_releases(self) -> None:
        held = [i for i in self.inhibitors if i.released_at is None]
        if not held:
            return
        readable, _, _ = select.select([i.read_end for i in held], [], [], 0)
        for inhibitor in held:
            if inhibitor.read_end in readable and os.read(inhibitor.read_end, 1) == b"":
                inhibitor.released_at = time.time()
                os.close(inhibitor.read_end)

    def held(self) -> list[Inhibitor]:
        return [i for i in self.inhibitors if i.released_at is None]

    def stop(self) -> None:
        self._halt.set()
        self.join(5)
        self.bus.close()


DELAY_MAX_S = 5.0  # the stand-in's InhibitDelayMaxSec in the fixture


@pytest.fixture
def system_bus(tmp_path):
    bus = PrivateSystemBus(tmp_path / "bus").start()
    logind = StandInLogind(bus.address, DELAY_MAX_S)
    logind.start()
    yield bus, logind
    logind.stop()
    bus.stop()
