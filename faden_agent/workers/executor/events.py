"""Docker events of managed containers -> event records for the backend.

A thread follows the engine's event stream (start, die with exit code, oom, health status,
destroy) of containers labelled managed or adopted explicitly. The position (the last
event's timeNano) is kept in the outbox's meta table, so a restarted executor replays what
it missed; record ids "ev:<container id>:<action>:<timeNano>" make the replay harmless.
When the engine goes away the thread reconnects with backoff.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Any, Callable

from faden_agent import protocol
from faden_agent.uplink import Uplink
from faden_agent.workers.executor.docker_ops import DockerOps
from faden_agent.workers.threads import start_daemon

log = logging.getLogger(__name__)

ACTIONS = ("start", "die", "oom", "health_status", "destroy")
SINCE_KEY = "executor.events_since"  # in the outbox's meta table
RECONNECT_MAX_S = 10.0


def event_record(event: dict[str, Any]) -> tuple[str, dict[str, Any]] | None:
    """(record id, data) for an interesting event, else None."""
    action, _, detail = (event.get("Action") or event.get("status") or "").partition(":")
    if action not in ACTIONS:
        return None
    actor = event.get("Actor") or {}
    attrs = actor.get("Attributes") or {}
    container_id = actor.get("ID") or event.get("id", "")
    time_nano = int(event.get("timeNano") or int(event.get("time", 0)) * 1_000_000_000)
    data: dict[str, Any] = {
        "type": f"container.{action}",
        "container_id": container_id,
        "name": attrs.get("name"),
        "image": attrs.get("image"),
        "command_id": attrs.get(protocol.LABEL_COMMAND_ID),
        "cluster": attrs.get(protocol.LABEL_CLUSTER),
        "workload": attrs.get(protocol.LABEL_WORKLOAD),
        "time": time_nano / 1e9,
    }
    if action == "die":
        data["exit_code"] = int(attrs["exitCode"]) if attrs.get("exitCode", "").lstrip("-").isdigit() else None
    if action == "health_status":
        data["health"] = detail.strip()
    return f"ev:{container_id}:{action}:{time_nano}", data


class EventWatcher:
    def __init__(self, ops: DockerOps, uplink: Uplink, is_adopted: Callable[[str], bool],
                 stopping: threading.Event | None = None):
        self.ops = ops
        self.uplink = uplink
        self.meta = uplink.outbox
        self.is_adopted = is_adopted
        self.stopping = stopping or threading.Event()
        self.connected = False

    def start(self, start_thread: Callable[..., threading.Thread] = start_daemon) -> None:
        if self.meta.get_meta(SINCE_KEY) is None:
            self.meta.set_meta(SINCE_KEY, f"{time.time():.9f}")  # first start: from now on
        start_thread("docker-events", self._loop)

    def stop(self) -> None:
        self.stopping.set()

    def _loop(self) -> None:
        delay = 0.5
        while not self.stopping.is_set():
            try:
                self._follow()
                delay = 0.5
            except Exception as exc:  # noqa: BLE001 - the engine went away: reconnect
                if self.connected:
                    log.warning("docker events stream lost (%s); reconnecting", str(exc)[:200])
                self.connected = False
                self.stopping.wait(delay)
                delay = min(delay * 2, RECONNECT_MAX_S)

    def _follow(self) -> None:
        since = self.meta.get_meta(SINCE_KEY)
        stream = self.ops.client.api.events(since=since, decode=True, filters={"type": "container"})
        if not self.connected:
            log.info("following docker events since %s", since)
        self.connected = True
        for event in stream:
            if self.stopping.is_set():
                return
            self._handle(event)
        raise ConnectionError("the event stream ended")

    def _handle(self, event: dict[str, Any]) -> None:
        attrs = (event.get("Actor") or {}).get("Attributes") or {}
        container_id = (event.get("Actor") or {}).get("ID", "")
        if attrs.get(protocol.LABEL_MANAGED) == "true" or self.is_adopted(container_id):
            record = event_record(event)
            if record is not None:
                self.uplink.put(protocol.EVENT, record[1], record_id=record[0])
        if event.get("timeNano"):
            self.meta.set_meta(SINCE_KEY, f"{int(event['timeNano']) / 1e9:.9f}")
