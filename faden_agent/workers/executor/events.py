"""Docker events of managed containers -> event records for the backend."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import Any

from faden_agent import protocol
from faden_agent.backend.producer import Reports
from faden_agent.common.backoff import Backoff
from faden_agent.workers.executor.death_cause import SETTLE_S, cause, last_error_lines, wants_cause
from faden_agent.workers.executor.docker_ops import DockerOps
from faden_agent.workers.executor.reconcile import Seen, reconcile, snapshot

log = logging.getLogger(__name__)

ACTIONS = ("start", "die", "oom", "health_status", "destroy")
SINCE_KEY = "executor.events_since"  # in the outbox's meta table
RECONNECT_MIN_S = 0.5
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
    def __init__(
        self,
        ops: DockerOps,
        reports: Reports,
        is_adopted: Callable[[str], bool],
        stop_event: threading.Event,
        known_gpus: Callable[[], dict[str, dict[str, Any]]] | None = None,
        fault_window_s: float = 300.0,
        ask_capture: Callable[[str, dict[str, Any], dict[str, Any] | None], Any] | None = None,
    ) -> None:
        """known_gpus(): the inventory's GPU evidence (death_cause.py); None: no causes.
        ask_capture: the `capture` of a hardware death (capture_request.py); None: no captures."""
        self.ops = ops
        self.known_gpus = known_gpus
        self.ask_capture = ask_capture
        self.fault_window_s = fault_window_s
        self.reports = reports
        self.meta = reports.outbox
        self.is_adopted = is_adopted
        self.stop_event = stop_event
        self.connected = False
        self.seen = Seen(self.meta)

    def start(self, start_thread: Callable[..., threading.Thread]) -> None:
        if self.meta.get_meta(SINCE_KEY) is None:
            self.meta.set_meta(SINCE_KEY, f"{time.time():.9f}")  # first start: from now on
        start_thread("docker-events", self._loop)

    def stop(self) -> None:
        self.stop_event.set()

    def _loop(self) -> None:
        retry = Backoff(RECONNECT_MIN_S, RECONNECT_MAX_S, jitter=0.0)
        while not self.stop_event.is_set():
            try:
                self._follow()
                retry.reset()
            except Exception as exc:  # noqa: BLE001 - the engine went away: reconnect
                if self.connected:
                    log.warning("docker events stream lost (%s); reconnecting", str(exc)[:200])
                self.connected = False
                self.stop_event.wait(retry.next_delay())

    def _follow(self) -> None:
        """Replay what dockerd still has since the stored position, reconcile what it no
        longer has (reconcile.py), then follow live events."""
        since = self.meta.get_meta(SINCE_KEY)
        until = f"{time.time():.9f}"
        replayed: dict[str, dict[str, list[int]]] = {}
        engine = self.ops.engine
        for event in engine.events(since=since, until=until, filters={"type": "container"}):
            reported = self._handle(event, live=False)
            if reported is not None:
                replayed.setdefault(reported[0], {}).setdefault(reported[1], []).append(reported[2])
        self._reconcile(replayed)
        self.meta.set_meta(SINCE_KEY, until)
        stream = engine.events(since=until, filters={"type": "container"})
        if not self.connected:
            log.info("following docker events since %s (replayed from %s)", until, since)
        self.connected = True
        for event in stream:
            if self.stop_event.is_set():
                return
            self._handle(event, live=True)
        raise ConnectionError(f"the event stream ended{f': {stream.broken}' if stream.broken else ''}")

    def _reconcile(self, replayed: dict[str, dict[str, list[int]]]) -> None:
        containers = {c.id: c for c in self.ops.managed_containers()}
        for container_id in self.seen.snapshots:
            if container_id not in containers and self.is_adopted(container_id):
                adopted = self.ops.find(container_id)
                if adopted is not None:
                    containers[adopted.id] = adopted
        reconcile(
            list(containers.values()),
            self.seen,
            self._put,
            replayed,
        )

    def _handle(self, event: dict[str, Any], live: bool) -> tuple[str, str, int] | None:
        """Report a managed container's event; (container id, action, time ns) when reported.
        A live event the last reconciliation already covered is not reported again."""
        attrs = (event.get("Actor") or {}).get("Attributes") or {}
        container_id = (event.get("Actor") or {}).get("ID", "")
        reported = None
        if attrs.get(protocol.LABEL_MANAGED) == "true" or self.is_adopted(container_id):
            record = event_record(event)
            time_nano = int(event.get("timeNano") or 0)
            covered = (self.seen.get(container_id) or {}).get("reconciled_as_of_ns", 0)
            if record is not None and not (live and time_nano <= covered):
                self._put(record[0], record[1])
                reported = (container_id, record[1]["type"].removeprefix("container."), time_nano)
                if live:
                    self._remember(container_id, record[1]["type"] == "container.destroy", covered)
        if event.get("timeNano"):
            self.meta.set_meta(SINCE_KEY, f"{int(event['timeNano']) / 1e9:.9f}")
        return reported

    def _put(self, record_id: str, data: dict[str, Any]) -> None:
        """Report one event; a death, OOM or unhealthy state with its GPUs and suspected cause,
        once the lines of what killed it had SETTLE_S to arrive (a live one waits that long at
        most, replayed ones not at all)."""
        if wants_cause(data) and self.known_gpus is not None:
            engine = self.ops.engine
            container_id = data["container_id"]
            try:
                attrs = engine.inspect_container(container_id)
            except Exception:  # noqa: BLE001 - removed already: no GPUs known, the cause still told
                attrs = None
            settled_at = float(data.get("time") or 0) + SETTLE_S
            self.stop_event.wait(max(0.0, min(SETTLE_S, settled_at - time.time())))
            errors = lambda: last_error_lines(engine, container_id, attrs)  # noqa: E731 - read only when needed
            data.update(cause(data, attrs, errors, self.known_gpus(), self.fault_window_s))
            capture = self.ask_capture(record_id, data, attrs) if self.ask_capture else None
            if capture is not None:
                data["capture"] = capture
        self.reports.put(protocol.EVENT, data, record_id=record_id)

    def _remember(self, container_id: str, destroyed: bool, covered: int) -> None:
        """The state just reported, for the next reconciliation."""
        if destroyed:
            self.seen.drop(container_id)
            return
        try:
            attrs = self.ops.engine.inspect_container(container_id)
        except Exception:  # noqa: BLE001 - gone already (its destroy comes next) or the engine hiccups
            return
        self.seen.put(container_id, {**snapshot(attrs), "reconciled_as_of_ns": covered})
