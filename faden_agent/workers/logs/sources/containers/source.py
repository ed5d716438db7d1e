"""Container logs of the containers this agent manages (found by protocol.LABEL_MANAGED).
Followers read `docker logs --follow --timestamps` from Docker's timestamp of the last accepted
line, so a replay is an exact duplicate; continuation lines are joined into entries
(multiline.py). The executor asks `drained` (naming the run's StartedAt) before it removes one.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections.abc import Iterable
from typing import TYPE_CHECKING

from faden_agent import protocol
from faden_agent.engine import containers as engine_containers
from faden_agent.engine.client import EngineClient
from faden_agent.engine.errors import ApiError, NotFound
from faden_agent.workers.logs.entry import MAX_LINE_BYTES, Entry, clean_line
from faden_agent.workers.logs.multiline import Joined, Joiner
from faden_agent.workers.logs.report import report_event
from faden_agent.workers.logs.sources import CONTAINERS, FIRST_START_WINDOW_S, ROTATED_BEFORE_READ, Shared, Source
from faden_agent.workers.logs.sources.managed import ManagedNames
from faden_agent.workers.logs.stamps import parse_rfc3339_ns

if TYPE_CHECKING:
    from faden_agent.protocol.status import SourceStatus

RESCAN_S = 60.0  # a full listing besides the events: a safety net for an event lost on a reconnect
ENDED, STOP = "faden:ended", "faden:stop"  # inbox markers: the event stream ended, the source stops
RESTART_CHECK_S = 5.0  # a stopped container's follower checks this often for a restart it missed
FOLLOW_ACTIONS = frozenset({"create", "start", "restart", "unpause", "die", "oom", "want"})
WAKE_ACTIONS = frozenset({"start", "restart", "unpause"})
ENDED_STATES = frozenset({"exited", "dead"})  # a run that is over: its log holds everything it printed
MAX_INBOX = 10_000
UNREADABLE_DRIVERS = frozenset({"none"})  # Docker keeps no copy to read back (others: its dual-logging cache)
STREAMS = ("stdout", "stderr")
STAMP_BYTES = 40  # Docker's "2024-01-01T00:00:00.123456789Z " prefix, with room to spare
CUT_MARKER = " [faden-agent: line cut at {cut} bytes; its rest dropped]"
log = logging.getLogger(__name__)


class LineCutter:
    """Splits a byte stream into lines, holding at most `limit` bytes of an unfinished line
    (no quadratic re-scans, no unbounded buffer). A longer line is cut: its head is shipped
    at once, marked, and the rest of it up to its newline is dropped; reading goes on."""

    def __init__(self, limit: int):
        self.limit = limit
        self.pending = bytearray()
        self.dropping = False

    def feed(self, chunk: bytes):
        """Yields (line, cut) for each line completed or cut in this chunk; `cut` is nonzero
        for a head shipped without its rest."""
        start = 0
        while start < len(chunk):
            newline = chunk.find(b"\n", start)
            end = len(chunk) if newline < 0 else newline
            if not self.dropping:
                room = self.limit - len(self.pending)
                self.pending += chunk[start : start + min(room, end - start)]
                if end - start > room:
                    self.dropping = True
                    yield bytes(self.pending), self.limit
            if newline < 0:
                return
            if not self.dropping:
                yield bytes(self.pending), 0
            self.pending.clear()
            self.dropping = False
            start = newline + 1

    def rest(self) -> tuple[bytes, int] | None:
        """The unfinished last line at the end of the stream, if it was not shipped yet."""
        if self.pending and not self.dropping:
            return bytes(self.pending), 0
        return None


def without_partial_stamp(chunk: bytes) -> bytes:
    """The rest of a line Docker cut into partial messages: its timestamp prefix would land in
    the middle of the line. A chunk that does not start with one is kept whole."""
    stamp, space, rest = chunk[:STAMP_BYTES].partition(b" ")
    if space and parse_rfc3339_ns(stamp) is not None:
        return rest + chunk[STAMP_BYTES:]
    return chunk


def close_stream(chunks: Iterable[bytes]) -> None:
    """Close a LogStream (from any thread: it ends a blocked read); a plain iterable has nothing to close."""
    if (close := getattr(chunks, "close", None)) is not None:
        close()


def engine_client(config) -> EngineClient:
    # One client shared by the event reader and every follower thread (a connection each).
    return EngineClient(config.docker_host, timeout_s=max(30.0, config.request_timeout_sec))


def position_key(container_id: str, stream: str) -> str:
    return f"{CONTAINERS.key_prefix}:{container_id}:{stream}"


class ContainersSource(Source):
    kind = CONTAINERS.name

    def __init__(self, shared: Shared, managed: ManagedNames) -> None:
        super().__init__(shared)
        self.managed = managed
        self.followers: dict[str, ContainerFollower] = {}
        self.read_upto: dict[str, int] = {}  # key -> timestamp of the last line read (this process)
        self.queued_upto: dict[str, int] = {}  # key -> position of the last entry put in the backlog
        self.lock = threading.Lock()
        self.lines_cut = 0  # lines longer than MAX_LINE_BYTES: head shipped, rest dropped
        # Docker events and drain requests, for follow(); bounded: a full inbox holds the event
        # reader back (dockerd keeps the stream), a drain request is simply asked again.
        self.inbox: queue.Queue = queue.Queue(maxsize=MAX_INBOX)
        self.unreadable: set[str] = set()  # container ids whose log driver cannot be read back
        self.not_followed: set[str] = set()  # asked to drain, but not ours to follow (or gone)
        self.events_seen = 0
        self.held = threading.Event()  # a follower holds a joined entry: the flusher has work
        self.flusher: threading.Thread | None = None
        # Made at the first follow() and kept: followers go on reading through it after a
        # follow() ends, and its close() would wait behind their reads (http/client.py).
        self.client: EngineClient | None = None

    def follow(self) -> None:
        if self.flusher is None or not self.flusher.is_alive():
            self.flusher = self.start_thread("logs-multiline", self.send_held)
        if self.client is None:
            self.client = engine_client(self.config)
        client = self.client
        events = None
        try:
            since = time.time()  # events from here on; the listing below covers what exists already
            events = client.events(since=f"{since:.9f}", filters={"type": "container", **protocol.MANAGED_FILTER})
            reader = self.start_thread("logs-docker-events", self.read_events, events, critical=False)
            self.refresh(client)
            self.last_error = ""
            next_refresh = time.monotonic() + RESCAN_S
            while not self.stop_event.is_set():
                if not reader.is_alive():
                    raise ConnectionError("the Docker event stream ended")
                try:  # blocks until an event, a drain request, the stream's end or a stop: no polling
                    what, container_id = self.inbox.get(timeout=max(0.0, next_refresh - time.monotonic()))
                except queue.Empty:
                    what = container_id = None
                if what == ENDED:
                    reader.join(1.0)  # then the check above sees it
                elif what is not None and what != STOP:
                    self.on_event(client, what, container_id)
                if time.monotonic() >= next_refresh:
                    self.refresh(client)
                    next_refresh = time.monotonic() + RESCAN_S
        finally:
            if events is not None:
                events.close()

    def send_held(self) -> None:
        """Sends each follower's held entry once the wait bound passed since its last line;
        sleeps on `held` while no follower holds one (an idle source costs no wakeup)."""
        while not self.stop_event.is_set():
            self.held.wait()
            self.held.clear()
            while not self.stop_event.is_set():
                now = time.monotonic()
                deadlines = [d for f in list(self.followers.values()) if (d := f.send_due(now)) is not None]
                if not deadlines:
                    break
                self.stop_event.wait(max(0.0, min(deadlines) - time.monotonic()))

    def read_events(self, events) -> None:
        """The event stream into the inbox (its own thread: the stream blocks); its end too."""
        try:
            self._read_events(events)
        finally:
            self._nudge(ENDED)

    def stop(self) -> None:
        self._nudge(STOP)
        self.held.set()
        for follower in list(self.followers.values()):
            follower.close()  # a quiet container's followed log would hold its thread (and the join)

    def _nudge(self, what: str) -> None:
        try:
            self.inbox.put_nowait((what, None))
        except queue.Full:
            pass  # the loop is awake anyway: it has a full inbox to read

    def _read_events(self, events) -> None:
        for event in events:
            if self.stop_event.is_set():
                return
            action = (event.get("Action") or event.get("status") or "").partition(":")[0]
            container_id = (event.get("Actor") or {}).get("ID") or event.get("id")
            if container_id:
                self.events_seen += 1
                while not self.stop_event.is_set():
                    try:
                        self.inbox.put((action, container_id), timeout=1.0)
                        break
                    except queue.Full:
                        continue

    def want(self, container_id: str) -> None:
        """Follow this container now (a drain request may come before its event)."""
        try:
            self.inbox.put_nowait(("want", container_id))
        except queue.Full:
            pass

    def on_event(self, client: EngineClient, action: str, container_id: str) -> None:
        if action == "destroy":
            self.forget(container_id)
            return
        if action not in FOLLOW_ACTIONS:
            return
        container: engine_containers.Container | None
        try:
            container = engine_containers.get(client, container_id)
        except NotFound:
            container = None
        if container is None or (container.labels or {}).get(protocol.LABEL_MANAGED) != "true":
            if action == "want":  # asked to drain what we do not follow (adopted, gone): nothing to wait for
                self.not_followed.add(container_id)
            return
        self.ensure_followers(container)
        if action in WAKE_ACTIONS:
            for stream in STREAMS:
                follower = self.followers.get(position_key(container.id, stream))
                if follower is not None:
                    follower.wake.set()

    def refresh(self, client: EngineClient) -> None:
        """The full listing: at start, and now and then in case an event was lost."""
        containers = engine_containers.listed(
            client, all=True, filters=protocol.MANAGED_FILTER, ignore_removed=True
        )  # removed while listing: skip it
        present = {position_key(c.id, stream) for c in containers for stream in STREAMS}
        self.managed.listed({c.id: c.name for c in containers})
        for container in containers:
            self.ensure_followers(container)
        for key in self.positions.keys(f"{CONTAINERS.key_prefix}:"):
            if key not in present:
                self.positions.forget(key)  # the container is gone; so is its log
        for key in [k for k in self.followers if k not in present and not self.followers[k].is_alive()]:
            del self.followers[key]
            self.read_upto.pop(key, None)
            self.queued_upto.pop(key, None)

    def ensure_followers(self, container) -> None:
        self.managed.seen(container.id, container.name)
        if container.id in self.unreadable:
            return
        driver = ((container.attrs.get("HostConfig") or {}).get("LogConfig") or {}).get("Type")
        if driver in UNREADABLE_DRIVERS:
            self.report_unreadable(container, f"log driver {driver!r} keeps no log to read back")
            return
        for stream in STREAMS:
            key = position_key(container.id, stream)
            follower = self.followers.get(key)
            if follower is None or not follower.is_alive():
                self.followers[key] = follower = ContainerFollower(self, container, stream, key)
                follower.start()

    def forget(self, container_id: str) -> None:
        self.managed.removed(container_id)
        for stream in STREAMS:
            key = position_key(container_id, stream)
            self.positions.forget(key)
            follower = self.followers.get(key)
            if follower is not None and not follower.is_alive():
                del self.followers[key]
                self.read_upto.pop(key, None)
                self.queued_upto.pop(key, None)
        self.unreadable.discard(container_id)
        self.not_followed.discard(container_id)

    def report_unreadable(self, container, why: str) -> None:
        """Once per container: its lines cannot reach Loki, and the backend should know."""
        if container.id in self.unreadable:
            return
        self.unreadable.add(container.id)
        log.warning("logs: container %s: %s; its output is not shipped", container.name, why)
        report_event(
            self.config,
            {
                "type": "logs.container_unreadable",
                "container_id": container.id,
                "name": container.name,
                "message": f"container {container.name}: {why}"[:300],
            },
            record_id=f"logs-unreadable:{container.id}",
        )

    def drained(self, container_id: str, started_at: str | None = None) -> bool:
        """Whether every line the (stopped) container printed was read and accepted by Loki;
        with `started_at` (Docker's StartedAt of its last run), that run's too: a follower
        still idle after an earlier run is woken to read it. Unknown containers are asked
        for (want); an unreadable one has nothing to wait for."""
        if container_id in self.unreadable or container_id in self.not_followed:
            return True
        for stream in STREAMS:
            key = position_key(container_id, stream)
            follower = self.followers.get(key)
            if follower is None:
                self.want(container_id)
                return False
            if not follower.idle:
                return False
            if started_at is not None and follower.read_started_at != started_at:
                follower.wake.set()  # a run it has not read yet (its start event still on its way)
                return False
            with self.lock:
                read = self.queued_upto.get(key)
            accepted = self.positions.get(key)
            if read is not None and not (isinstance(accepted, int) and accepted >= read):
                return False
        return True

    def resume_point(self, key: str) -> int | None:
        """Docker's timestamp of the last line read (or accepted) of `key`; None: none yet."""
        with self.lock:
            read = self.read_upto.get(key)
        accepted = self.positions.get(key)
        return read if read is not None else accepted if isinstance(accepted, int) else None

    def start_after(self, key: str) -> int:
        """Lines with a timestamp at or before this were read already (or are from before the window)."""
        with self.lock:
            read = self.read_upto.get(key)
        if read is not None:
            return read
        accepted = self.positions.get(key)
        if isinstance(accepted, int):
            return accepted - 1  # the accepted line itself again: an exact duplicate at worst
        return (int(time.time()) - FIRST_START_WINDOW_S) * 1_000_000_000

    def status(self) -> SourceStatus:
        return {
            **super().status(),
            "followers": sum(f.is_alive() for f in list(self.followers.values())),
            "lines_cut": self.lines_cut,
            "unreadable": len(self.unreadable),
            "events": self.events_seen,
        }


class ContainerFollower:
    def __init__(self, source: ContainersSource, container, stream: str, key: str):
        self.name = f"logs-{container.name}-{stream}"
        self.thread: threading.Thread | None = None
        self.source = source
        self.container = container
        self.stream = stream
        self.key = key
        self.wake = threading.Event()  # set on the container's start event: read again at once
        self.idle = False  # read to the end of a stopped container's log; waiting for a restart
        self.read_started_at: str | None = None  # StartedAt of the run it read (or reads) to the end
        self.reading: Iterable[bytes] | None = None  # the log being read, for close()
        self.lock = threading.Lock()  # the joiner: this follower's reader and the flusher
        self.joiner = Joiner(source.config.log_multiline, source.config.log_multiline_wait_sec)
        labels = container.labels or {}
        self.labels = source.labels.container(
            container.name, labels.get(protocol.LABEL_CLUSTER), labels.get(protocol.LABEL_WORKLOAD), stream
        )

    def start(self) -> None:
        """Read on a thread of its own; not critical: a follower ends with its container, and
        the next event or listing starts another."""
        self.thread = self.source.start_thread(self.name, self.run, critical=False)

    def is_alive(self) -> bool:
        return self.thread is not None and self.thread.is_alive()

    def run(self) -> None:
        stop = self.source.stop_event
        try:
            while not stop.is_set():
                self.container.reload()
                started_at = self.read_started_at = self.container.attrs.get("State", {}).get("StartedAt")
                if not self.read_until_stopped():
                    return
                self.idle = True
                while not stop.is_set():  # wait for the container to run (again)
                    self.wake.wait(RESTART_CHECK_S)
                    self.wake.clear()
                    self.container.reload()
                    state = self.container.attrs.get("State", {})
                    if state.get("Running") or state.get("StartedAt") != started_at:
                        self.idle = False
                        break
        except NotFound:
            return  # removed; its remaining lines went with it
        except ApiError as exc:
            if exc.status_code == 409:  # "dead or marked for removal": gone in a moment
                return
            if "does not support reading" in exc.explanation:
                self.source.report_unreadable(self.container, "its log driver does not support reading")
                return
            log.warning("logs: following %s %s stopped (%s); resuming shortly", self.container.name, self.stream, exc)
        except Exception as exc:  # noqa: BLE001 - the source's next refresh starts a new follower
            log.warning("logs: following %s %s stopped (%s); resuming shortly", self.container.name, self.stream, exc)

    def read_until_stopped(self) -> bool:
        """Follow the log until the container stops; False when the backlog closed."""
        after_ns = self.start_ns = self.source.start_after(self.key)
        self.caught_up = False
        if self.rotated_past(self.source.resume_point(self.key)):
            self.source.lost(1, ROTATED_BEFORE_READ, at_least=True)
        if not self.feed(self.read_from(after_ns, follow=True)):
            return False
        # A follow can end before the engine's last lines (the json-file reader stops when the
        # stopped container's log closes): one plain read past the last line read takes them,
        # but only of the run just followed, once it has ended (a read of a run starting now
        # would end mid-way and cut its first entry in two).
        if self.run_has_ended():
            self.start_ns = self.source.start_after(self.key)
            self.caught_up = False
            if not self.feed(self.read_from(self.start_ns, follow=False)):
                return False
        with self.lock:  # the stream ended (the container stopped): nothing more continues it
            joined = self.joiner.flush()
            return joined is None or self.put(joined)

    def run_has_ended(self) -> bool:
        """Whether the run this follower read (StartedAt) has exited and no other began since."""
        self.container.reload()
        state = self.container.attrs.get("State", {})
        return state.get("Status") in ENDED_STATES and state.get("StartedAt") == self.read_started_at

    def close(self) -> None:
        """From the source's stop: ends its read of the log, or its wait for a restart (it then
        sees the stop)."""
        reading = self.reading
        if reading is not None:
            close_stream(reading)
        self.wake.set()

    def read_from(self, after_ns: int, follow: bool) -> Iterable[bytes]:
        """The log's frames from the second holding `after_ns` (`since` has 1 s resolution)."""
        return self.container.logs(
            follow=follow,
            timestamps=True,
            since=max(1, after_ns // 1_000_000_000),
            stdout=self.stream == "stdout",
            stderr=self.stream == "stderr",
        )

    def feed(self, chunks: Iterable[bytes]) -> bool:
        """Ship every line of `chunks`; False when the backlog closed."""
        lines = LineCutter(MAX_LINE_BYTES + STAMP_BYTES)
        continued = False
        self.reading = chunks
        if self.source.stop_event.is_set():  # stop() may have looked before it was set
            close_stream(chunks)
        try:
            for chunk in chunks:
                if continued:
                    chunk = without_partial_stamp(chunk)
                # Without a TTY each chunk is one log message (one multiplexed frame); Docker cuts a
                # line into 16 KiB partial messages, each with its own timestamp prefix.
                continued = not chunk.endswith(b"\n")
                for line, cut in lines.feed(chunk):
                    if not self.ship(line, cut):
                        return False
        finally:
            self.reading = None
        rest = lines.rest()
        return rest is None or self.ship(*rest)

    def send_due(self, now: float) -> float | None:
        """Send the held entry if its wait is over; the deadline of one still held, else None."""
        with self.lock:
            joined = self.joiner.due(now)
            if joined is not None:
                self.put(joined)
            return self.joiner.deadline

    def rotated_past(self, last_ns: int | None) -> bool:
        """Whether Docker's log no longer holds the last line read: its oldest line is newer, so
        the json-file rotated (max-file) past it and lines after it may be gone (how many,
        nobody can say: at least one, unless that line happened to end a rotated file)."""
        if last_ns is None:
            return False
        chunks = self.container.logs(
            follow=False, timestamps=True, stdout=self.stream == "stdout", stderr=self.stream == "stderr"
        )
        for chunk in chunks:
            close_stream(chunks)  # the rest is not read: its connection goes
            oldest = parse_rfc3339_ns(chunk.partition(b" ")[0])
            return oldest is not None and oldest > last_ns
        return False

    def ship(self, line: bytes, cut: int = 0) -> bool:
        stamp, _, text = line.partition(b" ")
        ts_ns = parse_rfc3339_ns(stamp)
        if ts_ns is None:  # not Docker's prefix after all: keep the whole line, in place
            ts_ns, text = self.source.start_after(self.key) + 1, line
        if not self.caught_up:
            if ts_ns <= self.start_ns:
                return True  # read before (`since` has 1 s resolution) or older than the window
            # Past the resume point the stream is in order: a line with the same nanosecond
            # stamp as the one before it is a new line, not a repeat.
            self.caught_up = True
        shown = clean_line(text[:MAX_LINE_BYTES] if cut else text)
        if cut:
            shown += CUT_MARKER.format(cut=MAX_LINE_BYTES)
            self.source.lines_cut += 1
        with self.lock:
            for joined in self.joiner.add(shown, ts_ns, ts_ns, time.monotonic()):
                if not self.put(joined):
                    return False
            held = self.joiner.deadline is not None
        with self.source.lock:
            self.source.read_upto[self.key] = ts_ns
        if held:
            self.source.held.set()
        self.source.lines_read += 1
        return True

    def put(self, joined: Joined) -> bool:
        """One entry into the backlog (the caller holds self.lock); its position is its head's
        stamp, so a replay after a crash reads the whole entry again."""
        entry = Entry(self.labels[joined.level], joined.ts_ns, joined.text, None, self.key, joined.first_position)
        if not self.source.backlog.put(entry):
            return False
        with self.source.lock:
            self.source.queued_upto[self.key] = joined.first_position
        return True
