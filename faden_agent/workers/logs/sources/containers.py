"""Container logs of the containers this agent manages (found by protocol.LABEL_MANAGED).

One follower thread per container and stream (stdout, stderr) reads `docker logs --follow
--timestamps` from the last position: Docker's own timestamp of the last accepted line.
When a container stops, its follower waits; when it starts again (restart), the follower
continues after the last line it read. A recreated container is a new container id and
gets a new follower from its first line. Lines carry Docker's timestamps, so a replay after
a crash is an exact duplicate; the line at exactly the stored timestamp is sent again.
"""

from __future__ import annotations

import logging
import re
import threading
import time
from datetime import datetime

from faden_agent import protocol
from faden_agent.workers.logs.entry import MAX_LINE_BYTES, Entry, clean_line
from faden_agent.workers.logs.sources import FIRST_START_WINDOW_SEC, Source

POLL_SEC = 2.0  # how often the list of managed containers is refreshed
STREAMS = ("stdout", "stderr")
STAMP_BYTES = 40  # Docker's "2024-01-01T00:00:00.123456789Z " prefix, with room to spare
CUT_MARKER = " [faden-agent: line cut at {cut} bytes; its rest dropped]"
_RFC3339 = re.compile(rb"(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d)(?:\.(\d{1,9}))?(Z|[+-]\d\d:\d\d)$")
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
                self.pending += chunk[start:start + min(room, end - start)]
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


def parse_rfc3339_ns(text: bytes) -> int | None:
    """Docker's RFC 3339 timestamp (nanoseconds, trailing zeros trimmed) -> epoch ns."""
    match = _RFC3339.match(text)
    if match is None:
        return None
    zone = "+00:00" if match[3] == b"Z" else match[3].decode()
    seconds = int(datetime.fromisoformat(match[1].decode() + zone).timestamp())
    return seconds * 1_000_000_000 + int((match[2] or b"").ljust(9, b"0"))


def docker_client(config):
    import docker  # only this reader needs the SDK

    kwargs = {"timeout": max(30.0, config.request_timeout_sec), "max_pool_size": 64}
    if config.docker_host:
        return docker.DockerClient(base_url=config.docker_host, **kwargs)
    return docker.from_env(**kwargs)


class ContainerSource(Source):
    kind = "containers"

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.followers: dict[str, ContainerFollower] = {}
        self.read_upto: dict[str, int] = {}  # key -> timestamp of the last line read (this process)
        self.lock = threading.Lock()
        self.lines_cut = 0  # lines longer than MAX_LINE_BYTES: head shipped, rest dropped

    def follow(self) -> None:
        client = docker_client(self.config)
        try:
            while not self.stop_event.is_set():
                self.refresh(client)
                self.last_error = ""
                self.stop_event.wait(POLL_SEC)
        finally:
            client.close()

    def refresh(self, client) -> None:
        containers = client.containers.list(all=True, filters={"label": f"{protocol.LABEL_MANAGED}=true"},
                                            ignore_removed=True)  # removed while listing: skip it
        present = set()
        for container in containers:
            for stream in STREAMS:
                key = f"container:{container.id}:{stream}"
                present.add(key)
                follower = self.followers.get(key)
                if follower is None or not follower.is_alive():
                    self.followers[key] = follower = ContainerFollower(self, container, stream, key)
                    # Not critical: a follower ends with its container; the next refresh starts another.
                    follower.thread = self.start_thread(follower.name, follower.run, critical=False)
        for key in self.positions.keys("container:"):
            if key not in present:
                self.positions.forget(key)  # the container is gone; so is its log
        for key in [k for k in self.followers if k not in present]:
            del self.followers[key]
            self.read_upto.pop(key, None)

    def start_after(self, key: str) -> int:
        """Lines with a timestamp at or before this were read already (or are from before the window)."""
        with self.lock:
            read = self.read_upto.get(key)
        if read is not None:
            return read
        accepted = self.positions.get(key)
        if isinstance(accepted, int):
            return accepted - 1  # the accepted line itself again: an exact duplicate at worst
        return (int(time.time()) - FIRST_START_WINDOW_SEC) * 1_000_000_000

    def status(self) -> dict[str, object]:
        return {**super().status(), "followers": sum(f.is_alive() for f in list(self.followers.values())),
                "lines_cut": self.lines_cut}


class ContainerFollower:
    def __init__(self, source: ContainerSource, container, stream: str, key: str):
        self.name = f"logs-{container.name}-{stream}"
        self.thread: threading.Thread | None = None
        self.source = source
        self.container = container
        self.stream = stream
        self.key = key
        labels = container.labels or {}
        self.labels = source.labels.container(
            container.name, labels.get(protocol.LABEL_CLUSTER), labels.get(protocol.LABEL_WORKLOAD), stream)

    def is_alive(self) -> bool:
        return self.thread is not None and self.thread.is_alive()

    def run(self) -> None:
        import docker.errors

        stop = self.source.stop_event
        try:
            while not stop.is_set():
                started_at = self.container.attrs.get("State", {}).get("StartedAt")
                if not self.read_until_stopped():
                    return
                while not stop.wait(1.0):  # wait for the container to run (again)
                    self.container.reload()
                    state = self.container.attrs.get("State", {})
                    if state.get("Running") or state.get("StartedAt") != started_at:
                        break
        except docker.errors.NotFound:
            return  # removed; its remaining lines went with it
        except docker.errors.APIError as exc:
            if exc.status_code == 409:  # "dead or marked for removal": gone in a moment
                return
            log.warning("logs: following %s %s stopped (%s); resuming shortly", self.container.name, self.stream, exc)
        except Exception as exc:  # noqa: BLE001 - the source's next refresh starts a new follower
            log.warning("logs: following %s %s stopped (%s); resuming shortly", self.container.name, self.stream, exc)

    def read_until_stopped(self) -> bool:
        """Follow the log until the container stops; False when the backlog closed."""
        after_ns = self.start_ns = self.source.start_after(self.key)
        self.caught_up = False
        chunks = self.container.logs(stream=True, follow=True, timestamps=True, since=max(1, after_ns // 1_000_000_000),
                                     stdout=self.stream == "stdout", stderr=self.stream == "stderr")
        lines = LineCutter(MAX_LINE_BYTES + STAMP_BYTES)
        for chunk in chunks:
            for line, cut in lines.feed(chunk):
                if not self.ship(line, cut):
                    return False
        rest = lines.rest()
        return rest is None or self.ship(*rest)

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
        entry = Entry(self.labels, ts_ns, shown, None, self.key, ts_ns)
        if not self.source.backlog.put(entry):
            return False
        with self.source.lock:
            self.source.read_upto[self.key] = ts_ns
        self.source.lines_read += 1
        return True
