"""Changes the inventory can see as they happen: Docker events of managed containers and
of images. Each one calls `on_change`, so a new record follows within seconds instead of
at the next interval. Runs in its own thread with its own client; reconnects with backoff
when the engine goes away."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import Any

from faden_agent import protocol
from faden_agent.common.backoff import Backoff
from faden_agent.engine.client import EngineClient
from faden_agent.engine.streams import EventStream

log = logging.getLogger(__name__)

CONTAINER_ACTIONS = frozenset(
    {
        "create",
        "start",
        "restart",
        "die",
        "stop",
        "kill",
        "oom",
        "destroy",
        "pause",
        "unpause",
        "rename",
        "update",
        "health_status",
    }
)
IMAGE_ACTIONS = frozenset({"pull", "delete", "tag", "untag", "import", "load"})
RETRY_MIN_S = 1.0
RETRY_MAX_S = 30.0


def is_change(event: dict[str, Any]) -> bool:
    action = (event.get("Action") or "").split(":", 1)[0]  # "health_status: healthy"
    attributes = (event.get("Actor") or {}).get("Attributes") or {}
    if event.get("Type") == "container":
        return action in CONTAINER_ACTIONS and attributes.get(protocol.LABEL_MANAGED) == "true"
    return event.get("Type") == "image" and action in IMAGE_ACTIONS


class DockerChangeWatcher:
    def __init__(self, docker_host: str | None, on_change: Callable[[], None], stop_event: threading.Event) -> None:
        self.docker_host = docker_host
        self.on_change = on_change
        self.stop_event = stop_event  # the worker's one stop event
        self._stream: EventStream | None = None
        self.thread: threading.Thread | None = None

    def start(self, start_thread: Callable[..., threading.Thread]) -> None:
        self.thread = start_thread("inventory-docker-events", self._run)

    def stop(self) -> None:
        self.stop_event.set()
        stream = self._stream
        if stream is not None:
            try:
                stream.close()
            except Exception:  # noqa: BLE001 - closing a broken stream is best effort
                pass

    def _run(self) -> None:
        retry = Backoff(RETRY_MIN_S, RETRY_MAX_S, jitter=0.0)
        connected_before = False
        while not self.stop_event.is_set():
            client = None
            try:
                client = EngineClient(self.docker_host, timeout_s=10)
                self._stream = stream = client.events(filters={"type": ["container", "image"]})
                if self.stop_event.is_set():
                    break  # stop() came before there was a stream for it to close
                retry.reset()
                if connected_before:
                    self.on_change()  # events may have been missed while disconnected
                connected_before = True
                for event in stream:
                    if is_change(event):
                        self.on_change()
                if stream.broken and not self.stop_event.is_set():
                    log.debug("docker events stream broke (%s); reconnecting with backoff", stream.broken)
            except Exception as exc:  # noqa: BLE001 - any engine failure: wait, reconnect
                if not self.stop_event.is_set():
                    log.debug("docker events unavailable (%s); retrying with backoff", exc)
            finally:
                self._stream = None
                if client is not None:
                    client.close()
            self.stop_event.wait(retry.next_delay())
