"""Reconciliation: what happened to the managed containers while nobody watched."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from datetime import datetime
from typing import Any

import orjson

from faden_agent import protocol

log = logging.getLogger(__name__)

SEEN_KEY = "executor.containers_seen"  # outbox meta: {container id: snapshot}
ZERO_TIME = "0001-01-01T00:00:00Z"


def docker_time_ns(value: str | None) -> int | None:
    """Docker's RFC 3339 time (nanoseconds) -> epoch ns; None for Docker's zero time or junk."""
    if not value or value.startswith("0001-"):
        return None
    head, _, frac = value.rstrip("Z").partition(".")
    zone = "+00:00"
    for sign in "+-":
        if sign in frac:  # an offset after the fraction
            frac, _, offset = frac.partition(sign)
            zone = sign + offset
    try:
        seconds = int(datetime.fromisoformat(head + zone).timestamp())
    except ValueError:
        return None
    digits = "".join(c for c in frac if c.isdigit())[:9]
    return seconds * 1_000_000_000 + int(digits.ljust(9, "0") or 0)


def snapshot(attrs: dict[str, Any]) -> dict[str, Any]:
    """What reconciliation compares, from `docker inspect`, plus what an event names."""
    state = attrs.get("State") or {}
    config = attrs.get("Config") or {}
    labels = config.get("Labels") or {}
    return {
        "name": (attrs.get("Name") or "").lstrip("/"),
        "image": config.get("Image"),
        "command_id": labels.get(protocol.LABEL_COMMAND_ID),
        "cluster": labels.get(protocol.LABEL_CLUSTER),
        "workload": labels.get(protocol.LABEL_WORKLOAD),
        "status": state.get("Status"),
        "started_at": state.get("StartedAt"),
        "finished_at": state.get("FinishedAt"),
        "exit_code": state.get("ExitCode"),
        "oom_killed": bool(state.get("OOMKilled")),
        "restart_count": int(attrs.get("RestartCount") or 0),
        "health": (state.get("Health") or {}).get("Status"),
    }


def missed(before: dict[str, Any], now: dict[str, Any], replayed: dict[str, list[int]]) -> list[tuple[str, str, dict]]:
    """(action, id key, extra data) for each change from `before` to `now` that the replay
    (`replayed`: action -> event times in ns, for this container) did not report."""
    found: list[tuple[str, str, dict]] = []
    restarts = now["restart_count"] - before["restart_count"] - len(replayed.get("start", []))
    if now["restart_count"] > before["restart_count"] and restarts > 0:
        found.append(
            (
                "restart",
                str(now["restart_count"]),
                {
                    "restarts": restarts,
                    "restart_count": now["restart_count"],
                    "time_ns": docker_time_ns(now["started_at"]),
                },
            )
        )
    finished = docker_time_ns(now["finished_at"])
    if finished is not None and now["finished_at"] != before["finished_at"]:
        reported = any(t >= finished for t in replayed.get("die", []))  # the die event follows FinishedAt
        if now["oom_killed"] and not reported and not replayed.get("oom"):
            found.append(("oom", now["finished_at"], {"time_ns": finished}))
        if not reported:
            found.append(
                (
                    "die",
                    now["finished_at"],
                    {
                        "exit_code": now["exit_code"],
                        "oom_killed": now["oom_killed"],
                        "finished_at": now["finished_at"],
                        "time_ns": finished,
                    },
                )
            )
    started = docker_time_ns(now["started_at"])
    if (
        started is not None
        and now["started_at"] != before["started_at"]
        and now["status"] == "running"
        and not any(t >= started for t in replayed.get("start", []))
    ):
        found.append(("start", now["started_at"], {"started_at": now["started_at"], "time_ns": started}))
    if now["health"] and now["health"] != before["health"] and not replayed.get("health_status"):
        found.append(
            (
                "health_status",
                f"{now['health']}:{now['started_at']}",
                {"health": now["health"], "time_ns": time.time_ns()},
            )
        )
    return found


class Seen:
    """The snapshots, in the outbox's meta table (one small JSON document)."""

    def __init__(self, meta: Any):
        self.meta = meta
        try:
            loaded = orjson.loads(meta.get_meta(SEEN_KEY) or "{}")
        except orjson.JSONDecodeError:
            loaded = {}
        self.snapshots: dict[str, dict[str, Any]] = loaded if isinstance(loaded, dict) else {}

    def get(self, container_id: str) -> dict[str, Any] | None:
        return self.snapshots.get(container_id)

    def put(self, container_id: str, snap: dict[str, Any]) -> None:
        self.snapshots[container_id] = snap
        self.save()

    def drop(self, container_id: str) -> None:
        if self.snapshots.pop(container_id, None) is not None:
            self.save()

    def save(self) -> None:
        self.meta.set_meta(SEEN_KEY, orjson.dumps(self.snapshots).decode())


def reconciled_record(
    container_id: str, action: str, key: str, snap: dict[str, Any], extra: dict[str, Any]
) -> tuple[str, dict[str, Any]]:
    time_ns = extra.pop("time_ns", None) or time.time_ns()
    data = {
        "type": f"container.{action}",
        "container_id": container_id,
        **{k: snap.get(k) for k in ("name", "image", "command_id", "cluster", "workload")},
        "time": time_ns / 1e9,
        "reconciled": True,
        **extra,
    }
    return f"ev:{container_id}:{action}:reconciled:{key}", data


def reconcile(
    containers: list[Any],
    seen: Seen,
    put: Callable[[str, dict[str, Any]], object],
    replayed: dict[str, dict[str, list[int]]],
) -> int:
    """Compare and report; `containers` are the managed ones now (with fresh attrs).
    Returns how many events were reported."""
    reported = 0
    current = {c.id: c for c in containers}
    for container_id, container in current.items():
        now = snapshot(container.attrs)
        before = seen.get(container_id)
        if before is not None:
            for action, key, extra in missed(before, now, replayed.get(container_id, {})):
                put(*reconciled_record(container_id, action, key, now, extra))
                reported += 1
        # Live events up to now are covered by this comparison; for a container seen for the
        # first time nothing was compared, so all of its events still count.
        seen.snapshots[container_id] = {**now, "reconciled_as_of_ns": time.time_ns() if before is not None else 0}
    for container_id in [c for c in seen.snapshots if c not in current]:
        before = seen.snapshots.pop(container_id)
        if "destroy" not in replayed.get(container_id, {}):
            put(*reconciled_record(container_id, "destroy", "gone", before, {}))
            reported += 1
    seen.save()
    if reported:
        log.info("reconciled %d missed container event(s)", reported)
    return reported
