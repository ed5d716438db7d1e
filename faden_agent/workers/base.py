"""What every worker shares: process set-up after fork, and the loop skeleton.

A worker reads as its loop, its inputs and its outputs:

    class InventoryWorker(Worker):
        name = "inventory"
        def setup(self): ...                 # open sockets, start threads
        def channels(self): return [...]     # inputs polled by the loop
        def handle(self, channel, message):  # one input message
        def tick(self): ...                  # periodic work; must not block
        def status(self): return {...}       # extra fields for the heartbeat
        def teardown(self): ...

The loop heartbeats to the supervisor from the main thread, so a main loop that is stuck
(or a process that is SIGSTOPped) stops heartbeating and is replaced. Blocking work
(Docker, NVML, HTTP) belongs in threads, never in handle() or tick().
"""

from __future__ import annotations

import ctypes
import faulthandler
import importlib
import logging
import os
import signal
import sys
import time
from typing import Any

import zmq

from faden_agent.config import Config
from faden_agent.ipc import Channel, Endpoints, EnvelopeError, Message
from faden_agent.logsetup import configure_logging
from faden_agent.proctitle import set_title

PR_SET_PDEATHSIG = 1
log = logging.getLogger(__name__)


class Worker:
    name = "worker"
    tick_interval_s = 1.0

    def __init__(self, config: Config):
        self.config = config
        self.endpoints = Endpoints(config.runtime_dir)
        self.stopping = False
        self.started_at = time.time()
        self._supervisor: Channel | None = None
        self._wakeup_r, self._wakeup_w = os.pipe()
        self._parent_pid = os.getppid()

    # --- hooks for subclasses

    def setup(self) -> None:
        pass

    def channels(self) -> list[Channel]:
        return []

    def handle(self, channel: Channel, message: Message) -> None:
        log.warning("%s: unexpected message %r", self.name, message.type)

    def tick(self) -> None:
        pass

    def status(self) -> dict[str, Any]:
        return {}

    def teardown(self) -> None:
        pass

    # --- the loop

    def run(self) -> int:
        self._install_signal_handlers()
        self._supervisor = Channel.connect(zmq.PUSH, self.endpoints.heartbeat, hwm=10)
        self.setup()
        poller = zmq.Poller()
        by_socket = {}
        for channel in self.channels():
            poller.register(channel.socket, zmq.POLLIN)
            by_socket[channel.socket] = channel
        poller.register(self._wakeup_r, zmq.POLLIN)
        next_beat = 0.0
        next_tick = 0.0
        while not self.stopping:
            now = time.monotonic()
            if now >= next_beat:
                self.beat()
                next_beat = now + self.config.worker_heartbeat_sec
            if now >= next_tick:
                self.tick()
                next_tick = now + self.tick_interval_s
            if os.getppid() != self._parent_pid:
                log.error("%s: supervisor is gone; exiting", self.name)
                return 1
            timeout = max(0.0, min(next_beat, next_tick) - time.monotonic())
            for sock, _ in poller.poll(int(timeout * 1000) + 1):
                if sock == self._wakeup_r:
                    os.read(self._wakeup_r, 64)
                    continue
                channel = by_socket[sock]
                try:
                    message = channel.recv(0)
                except EnvelopeError as exc:
                    log.warning("%s: dropped a malformed message: %s", self.name, exc)
                    continue
                if message is not None:
                    self.handle(channel, message)
        self.teardown()
        return 0

    def beat(self) -> None:
        body = {"name": self.name, "pid": os.getpid(), "status": self.status()}
        assert self._supervisor is not None
        self._supervisor.send("heartbeat", body, block=False)

    def request_stop(self, *_: Any) -> None:
        self.stopping = True
        os.write(self._wakeup_w, b"x")

    def _install_signal_handlers(self) -> None:
        signal.signal(signal.SIGTERM, self.request_stop)
        # Ctrl-C reaches the whole foreground group; the supervisor orchestrates the stop.
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        faulthandler.register(signal.SIGUSR1, file=sys.stderr, all_threads=True)


def _die_with_parent(expected_parent: int) -> None:
    """Ask the kernel to SIGKILL us when the supervisor dies, even by kill -9."""
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    if os.getppid() != expected_parent:  # the parent died before prctl took effect
        os._exit(1)


def load_worker_class(target: str) -> type[Worker]:
    module_name, _, class_name = target.partition(":")
    return getattr(importlib.import_module(module_name), class_name)


def worker_main(name: str, target: str, config: Config, parent_pid: int) -> None:
    """Entry point in a freshly forked child; never returns."""
    code = 1
    try:
        _die_with_parent(parent_pid)
        set_title(f"faden-agent: worker {name}", f"faden-{name}")
        configure_logging(config.log_level, f"faden-agent/{name}")
        for sig in (signal.SIGCHLD, signal.SIGHUP):
            signal.signal(sig, signal.SIG_DFL)
        signal.set_wakeup_fd(-1)
        worker_class = load_worker_class(target)
        worker = worker_class(config)
        worker.name = name
        code = worker.run()
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else 1
    except BaseException:
        log.exception("worker %s crashed", name)
        code = 70
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)
