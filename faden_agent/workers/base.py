"""What every worker shares: process set-up after fork, and the loop skeleton
(setup, channels, handle, tick, status, teardown). The main thread tells the supervisor it
is alive, so a stuck loop falls silent and is replaced; blocking work belongs in threads
started with start_thread(), and a critical thread that dies ends the worker (THREAD_DIED_EXIT).
"""

from __future__ import annotations

import ctypes
import faulthandler
import importlib
import logging
import os
import select
import signal
import sys
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any

import zmq

from faden_agent.common.logsetup import configure_logging
from faden_agent.common.proctitle import set_title
from faden_agent.config import Config
from faden_agent.disk.diskfull import DISK, DiskFull, is_disk_full
from faden_agent.ipc import Channel, Endpoints, EnvelopeError, Message, send_last_word
from faden_agent.workers.threads import WorkerThreads

PR_SET_PDEATHSIG = 1
THREAD_DIED_EXIT = 3
JOIN_BUDGET_S = 2.0  # one bound for joining all of a worker's threads at stop
# The libraries a worker loaded and touched only to start (its imports, a first TLS
# handshake, the first push) go back to the kernel this long after its set-up (coldpages.py).
COLD_PAGES_AFTER_S = 10.0
log = logging.getLogger(__name__)


class Worker:
    name = "worker"
    tick_interval_s = 1.0
    # True while the status is not yet the outcome of the worker's first work (set by those
    # that have one: the inventory's first round, the engine's first answer); said in the
    # status as `starting`, for which the first heartbeat waits (stream/heartbeat.py)
    starting = False

    def __init__(self, config: Config, name: str | None = None):
        """`name`: the supervisor's name for it (its table, ps, metric labels); the class's by default."""
        if name is not None:
            self.name = name
        self.config = config
        self.endpoints = Endpoints(config.runtime_dir)
        self.stop_requested = False
        self._alive_asked = False  # alive_now(): a thread has news for ps
        self.started_at = time.time()
        self._supervisor: Channel | None = None
        self._wakeup_r, self._wakeup_w = os.pipe()
        self._parent_pid = os.getppid()
        self.worker_threads = WorkerThreads(self.name, self._wake)
        self.stop_event = self.worker_threads.stop_event  # the one stop signal of every thread

    def start_thread(
        self, name: str, target: Callable[..., Any], *args: Any, critical: bool = True, finite: bool = False
    ) -> threading.Thread:
        """Start a supervised thread (see threads.py): critical ones take the worker down
        when they die; `finite` ones may return (their job is done) without it."""
        return self.worker_threads.start(name, target, *args, critical=critical, finite=finite)

    def join_threads(self) -> list[str]:
        """Stop and join every thread within the worker's one join budget; callable from
        teardown() (e.g. before a final save) and called again after it."""
        self.worker_threads.stop()
        return self.worker_threads.join(JOIN_BUDGET_S)

    # --- hooks for subclasses

    def setup(self) -> None:
        pass

    def channels(self) -> list[Channel]:
        return []

    def handle(self, channel: Channel, message: Message) -> None:
        log.warning("%s: unexpected message %r", self.name, message.type)

    def tick(self) -> None:
        pass

    def status(self) -> Mapping[str, object]:
        """What ps and /metrics show of the worker: its TypedDict in protocol/status.py."""
        return {}

    def teardown(self) -> None:
        pass

    # --- the loop

    def run(self) -> int:
        self._install_signal_handlers()
        self._supervisor = Channel.connect(zmq.PUSH, self.endpoints.liveness, hwm=10)
        if not self._set_up():
            return 0  # stopped while waiting for disk space
        poller = zmq.Poller()
        by_socket = {}
        for channel in self.channels():
            poller.register(channel.socket, zmq.POLLIN)
            by_socket[channel.socket] = channel
        poller.register(self._wakeup_r, zmq.POLLIN)
        next_alive = 0.0
        cold_pages_at = time.monotonic() + COLD_PAGES_AFTER_S if self.config.prefork else None
        # A worker without periodic work (no tick of its own) wakes only to say it is alive.
        has_tick = type(self).tick is not Worker.tick
        next_tick = 0.0 if has_tick else float("inf")
        while not self.stop_requested:
            if self.worker_threads.failure is not None:
                return self._fail_for_thread()
            now = time.monotonic()
            if now >= next_alive or self._alive_asked:
                self._alive_asked = False
                self.tell_alive()
                next_alive = now + self.config.worker_liveness_sec
                if cold_pages_at is not None and now >= cold_pages_at:
                    cold_pages_at = None
                    from faden_agent.common.coldpages import page_out_cold_libraries  # PREFORK=off: never loaded

                    page_out_cold_libraries()
            if now >= next_tick:
                try:
                    self.tick()
                except DiskFull:
                    pass  # reported in the "alive" message (disk_full); the tick comes again
                next_tick = now + self.tick_interval_s
            if os.getppid() != self._parent_pid:
                log.error("%s: supervisor is gone; exiting", self.name)
                return 1
            timeout = max(0.0, min(next_alive, next_tick) - time.monotonic())
            for sock, _ in poller.poll(int(timeout * 1000) + 1):
                if sock == self._wakeup_r:
                    os.read(self._wakeup_r, 64)
                    continue
                channel = by_socket[sock]
                try:
                    message = channel.recv(0)
                except EnvelopeError as exc:
                    log.warning("%s: dropped a malformed message: %s", self.name, exc)
                    if channel.socket.type == zmq.REP:  # a REP socket takes no request before it answers
                        channel.send("error", {"message": f"malformed request: {exc}"[:300]})
                    continue
                if message is not None:
                    self.handle(channel, message)
                    if has_tick:  # a message can shorten the interval (the executor's first job)
                        next_tick = min(next_tick, time.monotonic() + self.tick_interval_s)
        self.worker_threads.stop()
        self.teardown()
        self.join_threads()
        return 0

    def _fail_for_thread(self) -> int:
        failure = self.worker_threads.failure or {}
        log.error(
            "%s: critical thread %s died (%s); exiting so the supervisor restarts the worker",
            self.name,
            failure.get("thread"),
            failure.get("error"),
        )
        body = {"name": self.name, "pid": os.getpid(), "sent_mono": time.monotonic(), **failure}
        # Flushed before the exit, so the supervisor can name the failure when it reaps us.
        send_last_word(self.endpoints.liveness, "thread_died", body)
        self.worker_threads.stop()
        try:
            self.teardown()
        except Exception:  # exiting anyway; the failure that matters is reported
            log.exception("%s: teardown after the thread failure failed", self.name)
        self.join_threads()
        return THREAD_DIED_EXIT

    def _set_up(self) -> bool:
        """setup(); when a full disk keeps it from creating its files (a first start), wait
        for space while telling the supervisor it is alive (`disk_full` in ps) instead of crash-looping. Only
        before any thread started: a setup cut short later is not safe to run again."""
        while not self.stop_requested:
            try:
                self.setup()
                if DISK.written(self.config.state_dir):
                    log.warning("%s: set up after waiting for disk space", self.name)
                return True
            except Exception as exc:  # only a full disk is waited out
                if not is_disk_full(exc, self.config.state_path) or self.worker_threads.alive():
                    raise
                if DISK.full(self.config.state_dir, f"setup: {exc}"[:200]):
                    log.error("%s: the disk is full, cannot set up (%s); waiting for space", self.name, exc)
            self.tell_alive({"setup": "waiting for disk space"})
            select.select([self._wakeup_r], [], [], self.config.worker_liveness_sec)
        return False

    def tell_alive(self, status: Mapping[str, object] | None = None) -> None:
        """The liveness message to the supervisor, with the worker's status (shown by ps)."""
        status = self.status() if status is None else status
        disk_full = DISK.snapshot()
        if disk_full:
            status = {**status, "disk_full": disk_full}  # shown by ps --json, status and the node heartbeat
        if self.starting:
            status = {**status, "starting": True}
        # sent_mono: the supervisor reads these lazily and times hangs from when they were sent.
        body = {"name": self.name, "pid": os.getpid(), "status": status, "sent_mono": time.monotonic()}
        assert self._supervisor is not None
        self._supervisor.send("alive", body, block=False)

    def alive_now(self) -> None:
        """From any thread: the next "alive" message (with the status) goes at once."""
        self._alive_asked = True
        self._wake()

    def request_stop(self, *_: Any) -> None:
        self.stop_requested = True  # the loop sets the stop event itself: no lock in a signal handler
        self._wake()

    def _wake(self) -> None:
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
        code = worker_class(config, name).run()
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else 1
    except BaseException:
        log.exception("worker %s crashed", name)
        code = 70
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)
