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
from faden_agent.workers.logs.entry import Entry, clean_line
from faden_agent.workers.logs.sources import FIRST_START_WINDOW_SEC, Source

POLL_SEC = 2.0  # how often the list of managed containers is refreshed
STREAMS = ("stdout", "stderr")
_RFC3339 = re.compile(rb"(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d)(?:\.(\d{1,9}))?(Z|[+-]\d\d:\d\d)$")
log = logging.getLogger(__name__)


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
        return {**super().status(), "followers": sum(f.is_alive() for f in list(self.followers.values()))}


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
        pending = b""
        for chunk in chunks:
            pending += chunk
            if b"\n" not in pending:
                continue
            *lines, pending = pending.split(b"\n")
            for line in lines:
                if not self.ship(line):
                    return False
        return not pending or self.ship(pending)

    def ship(self, line: bytes) -> bool:
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
        entry = Entry(self.labels, ts_ns, clean_line(text), None, self.key, ts_ns)
        if not self.source.backlog.put(entry):
            return False
        with self.source.lock:
            self.source.read_upto[self.key] = ts_ns
        self.source.lines_read += 1
        return True
