"""On start: find the containers the agent manages (label, or adopted explicitly) and report
them, so a restarted or reinstalled agent picks up what is already running.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Any

from faden_agent import protocol
from faden_agent.backend.producer import Reports
from faden_agent.common.backoff import Backoff
from faden_agent.protocol.container import describe
from faden_agent.workers.executor.docker_ops import CommandFailed, DockerOps
from faden_agent.workers.executor.journal import Journal

log = logging.getLogger(__name__)
RETRY_MIN_S = 0.5
RETRY_MAX_S = 10.0


def container_summary(container: Any) -> dict[str, Any]:
    labels = container.labels or {}
    facts = describe(container.attrs)
    return {
        **facts,
        "container_id": facts["id"],  # the old names of id and state, still sent for one release
        "status": facts["state"],
        "managed_by": "label" if labels.get(protocol.LABEL_MANAGED) == "true" else "adoption",
        "command_id": labels.get(protocol.LABEL_COMMAND_ID),
        "cluster": labels.get(protocol.LABEL_CLUSTER),
        "workload": labels.get(protocol.LABEL_WORKLOAD),
        "ray": labels.get(protocol.LABEL_RAY) == "true",
    }


def managed_containers(ops: DockerOps, journal: Journal) -> list[Any]:
    found = {c.id: c for c in ops.managed_containers()}
    for container_id in journal.adopted_ids() - set(found):
        container = ops.find(container_id)
        if container is None:
            journal.forget(container_id)  # removed behind our back
        else:
            found[container.id] = container
    return list(found.values())


def report_managed(ops: DockerOps, journal: Journal, reports: Reports, boot: int) -> int:
    containers = managed_containers(ops, journal)
    for container in containers:
        data = {"type": "container.adopted", **container_summary(container)}
        reports.put(protocol.EVENT, data, record_id=f"ev:{container.id}:adopted:{boot}")
    reports.put(
        protocol.EVENT,
        {"type": "executor.adoption", "count": len(containers), "names": sorted(c.name for c in containers)},
        record_id=f"ev:adoption:{boot}",
    )
    log.info("adopted %d managed container(s)", len(containers))
    return len(containers)


def adopt(ops: DockerOps, journal: Journal, reports: Reports, stop_event: threading.Event) -> None:
    """Report (the executor runs this on a thread), retrying until the engine answers."""
    boot = time.time_ns()
    retry = Backoff(RETRY_MIN_S, RETRY_MAX_S, jitter=0.0)
    while not stop_event.is_set():
        try:
            report_managed(ops, journal, reports, boot)
            return
        except CommandFailed as exc:
            log.warning("adoption waits for the Docker engine: %s", exc.message)
            stop_event.wait(retry.next_delay())
