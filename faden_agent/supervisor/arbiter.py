"""The supervisor loop, after gunicorn's arbiter: one loop of small verb-named steps."""

from __future__ import annotations

import errno
import gc
import logging
import math
import os
import signal
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import zmq

from faden_agent import __version__
from faden_agent.common.proctitle import set_title
from faden_agent.config import Config
from faden_agent.disk.files import ensure_private_dir
from faden_agent.ipc import Channel, Endpoints, EnvelopeError, ensure_runtime_dir
from faden_agent.ipc.dbusconn import system_bus_address
from faden_agent.supervisor import lock
from faden_agent.supervisor.metrics.endpoint import MetricsEndpoint
from faden_agent.supervisor.notify import SystemdNotifier
from faden_agent.supervisor.peer_demand import PeerDemand
from faden_agent.supervisor.policy import RestartPolicy
from faden_agent.supervisor.prefork import prepare_to_fork
from faden_agent.supervisor.shutdown import ShutdownDelay
from faden_agent.supervisor.states import WorkerProcess, WorkerState
from faden_agent.supervisor.table import ResourceSampler, worker_row
from faden_agent.workers import WORKERS
from faden_agent.workers.base import THREAD_DIED_EXIT, worker_main

log = logging.getLogger(__name__)

# Without these the agent is useless (no commands, no reports): one that stays FATAL gets
# the whole service restarted by systemd's watchdog. Inventory and logs do not.
REQUIRED_WORKERS = ("stream", "executor")
LAST_WORD_WAIT_S = 0.5  # for the "thread_died" of a worker already gone (await_last_word)
HUNG_DUMP_GRACE_S = 0.5  # time for faulthandler to write the traceback before SIGKILL
RESOURCE_SAMPLE_S = 2.0  # `ps` asked more often than this gets the last sample
# A dormant worker's demand check rides on every turn of the loop (not on a wake-up for the
# metrics endpoint alone); a wake-up of its own only when none came for this long (hang
# deadlines wake the loop every ~8 s). Asked-for starts: at once.
DORMANT_CHECK_S = 10.0
MAX_SLEEP_S = 30.0  # a safety net: everything due has its own time
LIVE_STATES = (WorkerState.STARTING, WorkerState.RUNNING, WorkerState.HUNG, WorkerState.STOPPING)


def describe_status(status: int) -> str:
    if os.WIFSIGNALED(status):
        sig = os.WTERMSIG(status)
        try:
            return f"signal {signal.Signals(sig).name}"
        except ValueError:
            return f"signal {sig}"
    return f"exit {os.WEXITSTATUS(status)}"


def exit_cause(status: int, hung: bool, thread_died: bool) -> str:
    """The cause of an exit as a bounded word (/metrics' worker_last_exit): hung, thread_died,
    signal_<NAME>, exit_<code>; never read back from the exit's text."""
    if hung:
        return "hung"
    if thread_died:
        return "thread_died"
    if os.WIFSIGNALED(status):
        sig = os.WTERMSIG(status)
        try:
            return f"signal_{signal.Signals(sig).name}"
        except ValueError:
            return f"signal_{sig}"
    return f"exit_{os.WEXITSTATUS(status)}"


def sent_mono(body: dict[str, Any]) -> float:
    """When a liveness message was sent (CLOCK_MONOTONIC is one clock for every process of
    the machine), at the latest now: read late, it still times a hang from its sending."""
    now = time.monotonic()
    sent = body.get("sent_mono")
    return min(float(sent), now) if isinstance(sent, (int, float)) and not isinstance(sent, bool) else now


class Supervisor:
    def __init__(
        self,
        config: Config,
        workers: dict[str, str] | None = None,
        notifier: SystemdNotifier | None = None,
        on_demand: dict[str, Callable[[], bool]] | None = None,
    ):
        self.config = config
        self.endpoints = Endpoints(config.runtime_dir)
        self.policy = RestartPolicy(
            backoff_min_s=config.restart_backoff_min_sec,
            backoff_max_s=config.restart_backoff_max_sec,
            max_restarts=config.restart_max,
            window_s=config.restart_window_sec,
            fatal_retry_s=config.fatal_retry_sec,
        )
        self.workers = {name: WorkerProcess(name, target) for name, target in (workers or WORKERS).items()}
        # Workers started only once wanted (peer_demand.py); until then STOPPED, saying so.
        if on_demand is None:
            on_demand = {"peer": PeerDemand(config).wanted} if workers is None else {}
        self.dormant = {name: wanted for name, wanted in on_demand.items() if name in self.workers}
        for name in self.dormant:
            self.workers[name].status = {"on_demand": "starts when this machine serves peers"}
        self.notifier = notifier or SystemdNotifier()
        self.sampler = ResourceSampler()
        self.started_at = time.time()
        self.stop_requested = False
        self.kill_now = False
        self.ready_sent = False
        self._last_status = ""
        self._signals: list[int] = []
        self._last_watchdog = 0.0
        self._watchdog_withheld = False
        self._last_sample = -RESOURCE_SAMPLE_S
        self._last_dormant_check = 0.0
        self._resources: dict[int, tuple[int | None, float | None]] = {}
        self.metrics = MetricsEndpoint(config, self.scrape_table, self.pids)
        self._stream_push: Channel | None = None

    # ------------------------------------------------------------------ main loop

    def run(self) -> int:
        self.prepare()
        log.info("supervisor %s started (pid %d), workers: %s", __version__, os.getpid(), ", ".join(self.workers))
        while not self.stop_requested:
            self.spawn_due_workers()
            due = self.next_wake_mono()
            # A wake-up for the metrics endpoint alone serves it and sleeps on: nothing else is due.
            while self.wait_for_events(self.metrics_wait(due)) and time.monotonic() < due:
                pass
            self.reap_workers()
            self.murder_hung_workers()
            self.release_shutdown_inhibitor()
            self.notify_systemd()
        self.shutdown()
        return 0

    def prepare(self) -> None:
        set_title(f"faden-agent: supervisor {__version__}", "faden-super")
        # Before any socket is bound: a second agent must not unlink the first one's sockets.
        ensure_private_dir(self.config.state_dir, "state directory")  # before anything is created in it
        self._locks = [lock.acquire(self.config.state_dir, "state directory")]
        ensure_runtime_dir(self.config.runtime_dir)
        if self.config.runtime_dir != self.config.state_dir:
            self._locks.append(lock.acquire(self.config.runtime_dir, "runtime directory"))
        tls = self.config.tls_verify() if self.config.speaks_tls() else None
        prepare_to_fork([w.target for w in self.workers.values()], tls, self.config.prefork)  # shared by every fork
        self._wakeup_r, wakeup_w = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
        signal.set_wakeup_fd(wakeup_w)
        for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGCHLD, signal.SIGHUP):
            signal.signal(sig, self._on_signal)
        self.control = Channel.bind(zmq.REP, self.endpoints.control)
        self.liveness = Channel.bind(zmq.PULL, self.endpoints.liveness, hwm=10_000)
        self.poller = zmq.Poller()
        self.poller.register(self.control.socket, zmq.POLLIN)
        self.poller.register(self.liveness.socket, zmq.POLLIN)
        self.poller.register(self._wakeup_r, zmq.POLLIN)
        self.metrics.open(self.poller)  # an address it cannot bind is shown by ps, never fatal
        self.shutdown_delay = ShutdownDelay.start(system_bus_address(), self.tell_stream_shutting_down)
        if self.shutdown_delay.fileno is not None:
            self.poller.register(self.shutdown_delay.fileno, zmq.POLLIN)

    def next_wake_mono(self) -> float:
        """When the next thing is due: a restart, a kill after the dump grace, a worker's hang
        deadline, the watchdog ping, a dormant worker's demand check (at most MAX_SLEEP_S)."""
        now = time.monotonic()
        due = [now + MAX_SLEEP_S]
        for w in self.workers.values():
            if w.state in (WorkerState.BACKOFF, WorkerState.FATAL):
                due.append(w.next_start_mono)
            if w.kill_at_mono is not None:
                due.append(w.kill_at_mono)
            elif (deadline := self.hang_deadline(w)) is not None:
                due.append(deadline)
        if self.notifier.watchdog_interval_s:
            due.append(self._last_watchdog + self.notifier.watchdog_interval_s)
        if self.dormant:
            due.append(self._last_dormant_check + DORMANT_CHECK_S)
        if (deadline := self.metrics.next_deadline()) is not None:
            due.append(deadline)
        if (release := self.shutdown_delay.due()) is not None:
            due.append(release)
        return min(due)

    def hang_deadline(self, worker: WorkerProcess) -> float | None:
        """When a live worker that stays silent counts as hung (None: not watched)."""
        if worker.pid is None or worker.state not in LIVE_STATES:
            return None
        if worker.state == WorkerState.STOPPING and self.stop_requested:
            return None  # the agent's stop has its own bound (shutdown)
        return (worker.last_alive_mono or worker.started_mono or time.monotonic()) + self.config.worker_hang_timeout_sec

    # ------------------------------------------------------------------ steps

    def spawn_due_workers(self) -> None:
        now = time.monotonic()
        self._last_dormant_check = now
        for worker in self.workers.values():
            if worker.name in self.dormant and not self.wanted_now(worker.name):
                continue
            if (
                worker.state in (WorkerState.STOPPED, WorkerState.BACKOFF, WorkerState.FATAL)
                and now >= worker.next_start_mono
            ):
                if worker.state == WorkerState.FATAL:
                    log.warning("retrying FATAL worker %s", worker.name)
                    worker.exit_times.clear()
                self.spawn_worker(worker)

    def wanted_now(self, name: str, asked: bool = False) -> bool:
        """Whether a dormant worker is to start: asked for, or its check says so (once
        wanted, always: it is never stopped for want of demand)."""
        if not (asked or self.dormant[name]()):
            return False
        del self.dormant[name]
        log.info("starting worker %s on demand", name)
        return True

    def spawn_worker(self, worker: WorkerProcess) -> None:
        sys.stdout.flush()
        sys.stderr.flush()
        parent = os.getpid()
        pid = os.fork()
        if pid == 0:
            # First thing: the child's collector then never touches (and copies) the inherited
            # objects. (Freezing in the parent, then unfreezing, would also thaw the preload.)
            gc.freeze()
            signal.signal(signal.SIGTERM, signal.SIG_DFL)  # until the worker installs its own
            self.metrics.forget_in_child()
            self.shutdown_delay.forget_in_child()  # else logind waits for the workers' copies too
            worker_main(worker.name, worker.target, self.config, parent)
        if worker.state != WorkerState.STOPPED:
            worker.restarts += 1
        worker.pid = pid
        worker.change_state(WorkerState.STARTING)
        worker.started_at = time.time()
        worker.started_mono = time.monotonic()
        worker.last_alive_mono = None
        worker.kill_at_mono = None
        worker.status = {}
        worker.failure = None
        log.info("spawned worker %s (pid %d)", worker.name, pid)

    def metrics_wait(self, due: float) -> float:
        """Seconds until `due` or the endpoint's next connection deadline, whichever is first."""
        deadline = self.metrics.next_deadline()
        return max(0.0, (due if deadline is None else min(due, deadline)) - time.monotonic())

    def wait_for_events(self, timeout_s: float) -> bool:
        """Waits, then does what woke it; True when only the metrics endpoint's sockets did."""
        # "alive" messages wake the loop only while a worker waits for its first one.
        # ... and while a shutdown waits for the stream worker to say it is done.
        starting = any(w.state == WorkerState.STARTING for w in self.workers.values())
        self.poller.register(self.liveness.socket, zmq.POLLIN if starting or self.shutdown_delay.waiting else 0)
        try:
            # Rounded up: waking a millisecond early would find nothing due and turn the loop twice.
            events = dict(self.poller.poll(math.ceil(timeout_s * 1000)))
        except zmq.ZMQError as exc:
            if exc.errno == errno.EINTR:
                return False
            raise
        if self._wakeup_r in events:
            self.handle_signals()
        self.drain_liveness()  # before reaping (a "thread_died" names the exit) and before `ps`
        if self.control.socket in events:
            self.answer_control()
        bus = self.shutdown_delay.fileno
        if bus is not None and bus in events:
            self.shutdown_delay.on_bus()
            if self.shutdown_delay.fileno is None:  # the bus is gone
                self.poller.unregister(bus)
        ours = {fd for fd in events if isinstance(fd, int) and fd != self._wakeup_r}
        self.metrics.serve(ours)  # also closes expired ones
        return bool(events) and len(ours) == len(events)

    def handle_signals(self) -> None:
        try:
            while os.read(self._wakeup_r, 512):
                pass
        except BlockingIOError:
            pass
        pending, self._signals = self._signals, []
        for sig in pending:
            if sig in (signal.SIGTERM, signal.SIGINT):
                if self.stop_requested:
                    self.kill_now = True
                self.stop_requested = True
            elif sig == signal.SIGHUP:
                log.info("SIGHUP ignored: configuration is read at start; restart the agent to apply changes")

    def drain_liveness(self) -> None:
        # ZMQ_EVENTS is one call; recv(0) would build a poller to find nothing (each scrape, twice).
        while self.liveness.socket.get(zmq.EVENTS) & zmq.POLLIN:
            try:
                message = self.liveness.recv()
            except EnvelopeError as exc:
                log.warning("dropped a malformed liveness message: %s", exc)
                continue
            if message is None:
                return
            body = message.body if isinstance(message.body, dict) else {}
            worker = self.workers.get(str(body.get("name")))
            if worker is None or worker.pid != body.get("pid"):
                continue  # a late message from a predecessor
            if message.type == "thread_died":
                self.record_thread_death(worker, body)
                continue
            if worker.state == WorkerState.STOPPING:
                continue  # on its way out: `ps` must not call it RUNNING again
            worker.last_alive_mono = sent_mono(body)
            worker.status = body.get("status") or {}
            if worker.state == WorkerState.STARTING:
                worker.change_state(WorkerState.RUNNING)
                worker.fatal_streak = 0
                log.info("worker %s is RUNNING (pid %d)", worker.name, worker.pid)

    def record_thread_death(self, worker: WorkerProcess, body: dict[str, Any]) -> None:
        """A critical thread of the worker died; the worker exits now (base.py). Until it is
        reaped it is STOPPING, and its exit will name the thread and the error."""
        worker.failure = f"thread {str(body.get('thread'))[:40]} died: {str(body.get('error'))[:200]}"
        worker.change_state(WorkerState.STOPPING)
        worker.last_alive_mono = sent_mono(body)  # the hang timer now bounds its exit
        log.error("worker %s (pid %s): %s", worker.name, worker.pid, worker.failure)

    def answer_control(self) -> None:
        try:
            message = self.control.recv(0)
            op = message.type if message else None
        except EnvelopeError as exc:
            self.control.send("error", {"message": str(exc)})
            return
        if op == "ps":
            self.sample_resources()
            self.control.send("ps", self.table())
        elif op == "start":  # a dormant worker is needed now (executor/peer_start.py)
            body = message.body if message is not None else None
            name = str(body.get("name") if isinstance(body, dict) else None)
            if name not in self.workers:
                self.control.send("error", {"message": f"unknown worker {name[:40]!r}"})
                return
            if name in self.dormant:
                self.wanted_now(name, asked=True)
            self.control.send("start", {"name": name, "state": self.workers[name].state.value})
        else:
            self.control.send("error", {"message": f"unknown request {op!r}"})

    def tell_stream_shutting_down(self, kind: str, body: dict[str, float]) -> None:
        """The machine goes down (or not after all): the stream worker reports it and says when all is sent."""
        if self._stream_push is None:  # kept open: a close at once would drop the message (linger 0)
            self._stream_push = Channel.connect(zmq.PUSH, self.endpoints.reports_ready, hwm=10)
        self._stream_push.send(kind, body, block=False)

    def release_shutdown_inhibitor(self) -> None:
        stream = self.workers.get("stream")
        self.shutdown_delay.release_when_done(stream.status if stream is not None else None)

    def reap_workers(self) -> None:
        while True:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return
            if pid == 0:
                return
            worker = next((w for w in self.workers.values() if w.pid == pid), None)
            if worker is not None:
                if os.waitstatus_to_exitcode(status) == THREAD_DIED_EXIT:
                    self.await_last_word(worker)
                self.record_exit(worker, status)

    def await_last_word(self, worker: WorkerProcess) -> None:
        """A worker exiting THREAD_DIED_EXIT sent its "thread_died" before it exited (base.py);
        ZeroMQ may still be carrying it here, and once reaped, a message is a predecessor's."""
        deadline = time.monotonic() + LAST_WORD_WAIT_S
        while worker.failure is None and (left := deadline - time.monotonic()) > 0:
            if self.liveness.socket.poll(math.ceil(left * 1000)):
                self.drain_liveness()

    def record_exit(self, worker: WorkerProcess, status: int) -> None:
        worker.exit_cause = exit_cause(status, worker.kill_at_mono is not None, bool(worker.failure))
        exit_text = describe_status(status)
        if worker.kill_at_mono is not None:
            exit_text = f"killed: hung ({exit_text})"
        if worker.failure:
            exit_text = f"{exit_text}: {worker.failure}"
            worker.failure = None
        worker.last_exit = exit_text
        worker.pid = None
        worker.kill_at_mono = None
        now = time.monotonic()
        if self.stop_requested:
            worker.change_state(WorkerState.EXITED)
            return
        worker.exit_times.append(now)
        if self.policy.is_fatal(worker.exit_times, now):
            worker.change_state(WorkerState.FATAL)
            worker.fatal_streak += 1
            worker.next_start_mono = now + self.policy.fatal_retry_s
            log.error(
                "worker %s FATAL: %s; more than %d restarts in %gs; retrying in %gs",
                worker.name,
                exit_text,
                self.policy.max_restarts,
                self.policy.window_s,
                self.policy.fatal_retry_s,
            )
        else:
            delay = self.policy.backoff(worker.exit_times, now)
            worker.change_state(WorkerState.BACKOFF)
            worker.next_start_mono = now + delay
            log.warning("worker %s exited (%s); restarting in %.2fs", worker.name, exit_text, delay)

    def murder_hung_workers(self) -> None:
        now = time.monotonic()
        for worker in self.workers.values():
            deadline = self.hang_deadline(worker)
            if deadline is None:
                continue
            assert worker.pid is not None
            if worker.kill_at_mono is not None:
                if now >= worker.kill_at_mono:  # a late beat after SIGCONT does not save it
                    self._kill(worker.pid, signal.SIGKILL)
                continue
            if now >= deadline:
                log.error(
                    "worker %s (pid %d) sent no liveness message for %.1fs: dumping its traceback and killing it",
                    worker.name,
                    worker.pid,
                    now - deadline + self.config.worker_hang_timeout_sec,
                )
                worker.kill_at_mono = now + HUNG_DUMP_GRACE_S
                if worker.state != WorkerState.STOPPING:  # a worker on its way out stays so
                    worker.change_state(WorkerState.HUNG)
                self._kill(worker.pid, signal.SIGUSR1)  # faulthandler writes every thread's stack
                self._kill(worker.pid, signal.SIGCONT)  # a stopped process must run to dump

    def sample_resources(self) -> None:
        """RSS and CPU% (since the previous sample) per process, for `ps`: taken when asked."""
        now = time.monotonic()
        if now - self._last_sample < RESOURCE_SAMPLE_S:
            return
        self._last_sample = now
        pids = {w.pid for w in self.workers.values() if w.pid is not None} | {os.getpid()}
        self.sampler.forget_dead(pids)
        self._resources = {pid: self.sampler.sample(pid) for pid in pids}

    def notify_systemd(self) -> None:
        """READY once every worker has either run or failed once: a worker that crash-loops
        (its journal unreadable, say) must not make systemd restart the whole agent, whose
        other workers keep running and executing. STATUS names the ones not running."""
        running = [w.name for w in self.workers.values() if w.state == WorkerState.RUNNING]
        failing = [
            w.name for w in self.workers.values() if w.state != WorkerState.RUNNING and w.name not in self.dormant
        ]
        status = f"{len(running)} workers running" + (f"; not running: {', '.join(failing)}" if failing else "")
        if self.dormant:
            status += f"; on demand: {', '.join(self.dormant)}"
        withheld = self.withheld_watchdog()
        if withheld:
            status += f"; watchdog withheld: {withheld}"
        if not self.ready_sent:
            if all(
                w.state == WorkerState.RUNNING or w.exit_times or w.name in self.dormant for w in self.workers.values()
            ):
                self.ready_sent = True
                self._last_status = status
                self.notifier.ready(status)
                log.info("ready: %s", status)
        elif status != self._last_status:
            self._last_status = status
            self.notifier.status(status)
        interval = self.notifier.watchdog_interval_s
        now = time.monotonic()
        if interval and now - self._last_watchdog >= interval:
            self._last_watchdog = now
            if withheld is None:
                self.notifier.watchdog()
            elif not self._watchdog_withheld:
                log.error("no longer feeding systemd's watchdog: %s; systemd will restart the agent", withheld)
            self._watchdog_withheld = withheld is not None

    def withheld_watchdog(self) -> str | None:
        """Why the agent is not healthy enough to be useful, or None. The rule (docs/service.md):
        a required worker is FATAL again after its FATAL retry, never RUNNING in between."""
        for name in REQUIRED_WORKERS:
            worker = self.workers.get(name)
            if worker is not None and worker.fatal_streak >= 2 and worker.state != WorkerState.RUNNING:
                return f"required worker {name} stays FATAL ({worker.last_exit})"
        return None

    # ------------------------------------------------------------------ stop

    def shutdown(self) -> None:
        log.info("stopping %d workers (bound %gs)", len(self.workers), self.config.stop_timeout_sec)
        self.notifier.stopping()
        self.shutdown_delay.close()  # a stop in order: nothing left to delay a shutdown for
        for worker in self.workers.values():
            if worker.pid is not None:
                worker.change_state(WorkerState.STOPPING)
                self._kill(worker.pid, signal.SIGTERM)
                self._kill(worker.pid, signal.SIGCONT)  # a stopped worker cannot act on SIGTERM
            elif worker.state != WorkerState.EXITED:
                worker.change_state(WorkerState.STOPPED)
        deadline = time.monotonic() + self.config.stop_timeout_sec
        while any(w.pid is not None for w in self.workers.values()):
            if self.kill_now or time.monotonic() >= deadline:
                for worker in self.workers.values():
                    if worker.pid is not None:
                        log.warning("worker %s did not stop in time: SIGKILL", worker.name)
                        self._kill(worker.pid, signal.SIGKILL)
                self.kill_now = False
                deadline = float("inf")
            self.wait_for_events(0.05)
            self.reap_workers()
        self.close_sockets()
        log.info("supervisor stopped")

    def close_sockets(self) -> None:
        self.metrics.close()
        if self._stream_push is not None:
            self._stream_push.close()
        for channel, address in ((self.control, self.endpoints.control), (self.liveness, self.endpoints.liveness)):
            channel.close()
            Path(self.endpoints.socket_path(address)).unlink(missing_ok=True)

    # ------------------------------------------------------------------ helpers

    def table(self) -> dict[str, Any]:
        rows = [worker_row(w, self._resources.get(w.pid or 0, (None, None))) for w in self.workers.values()]
        sup = {"pid": os.getpid(), "version": __version__, "uptime_s": round(time.time() - self.started_at, 3)}
        sup["rss_bytes"], sup["cpu_percent"] = self._resources.get(os.getpid(), (None, None))
        sup["started_at"] = self.started_at
        sup["metrics"] = self.metrics.status()
        return {"supervisor": sup, "workers": rows}

    def scrape_table(self) -> dict[str, Any]:
        """What a scrape reads of the table (supervisor/metrics/families.py, health.py), the liveness
        messages already sent read first (never waits): `ps`'s rows less resources and uptimes."""
        self.drain_liveness()
        now = time.monotonic()
        rows = []
        for w in self.workers.values():
            age = w.liveness_age(now)
            rows.append(
                {
                    "name": w.name,
                    "state": w.state.value,
                    "restarts": w.restarts,
                    "last_exit": w.last_exit,
                    "exit_cause": w.exit_cause,
                    "alive_age_s": round(age, 3) if age is not None else None,
                    "status": w.status,
                }
            )
        server = self.metrics.server
        endpoint = server.figures() if server else {}
        return {"supervisor": {"started_at": self.started_at, "metrics": endpoint}, "workers": rows}

    def pids(self) -> dict[str, int]:
        """Process name -> pid of the supervisor and each live worker."""
        live = {w.name: w.pid for w in self.workers.values() if w.pid is not None}
        return {"supervisor": os.getpid(), **live}

    def _on_signal(self, signum: int, _frame: Any) -> None:
        self._signals.append(signum)

    @staticmethod
    def _kill(pid: int, sig: int) -> None:
        try:
            os.kill(pid, sig)
        except ProcessLookupError:
            pass
