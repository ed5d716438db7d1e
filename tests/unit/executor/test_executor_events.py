"""Docker event -> event record mapping and pull progress arithmetic, on messages shaped
exactly as dockerd 20.10 sends them."""

from __future__ import annotations

from faden_agent import protocol
from faden_agent.workers.executor.docker_ops import PullProgress
from faden_agent.workers.executor.events import event_record


def docker_event(action, **attrs):
    return {
        "status": action,
        "id": "c0ffee",
        "from": "img",
        "Type": "container",
        "Action": action,
        "Actor": {
            "ID": "c0ffee",
            "Attributes": {
                "name": "ray-head",
                "image": "img",
                protocol.LABEL_MANAGED: "true",
                protocol.LABEL_CLUSTER: "c1",
                **attrs,
            },
        },
        "scope": "local",
        "time": 1700000000,
        "timeNano": 1700000000123456789,
    }


def test_die_carries_the_exit_code_and_a_deterministic_id():
    record_id, data = event_record(docker_event("die", exitCode="137"))
    assert record_id == "ev:c0ffee:die:1700000000123456789"
    assert data["type"] == "container.die" and data["exit_code"] == 137 and data["cluster"] == "c1"
    assert event_record(docker_event("die", exitCode="137"))[0] == record_id  # replay dedups


def test_health_status_and_uninteresting_actions():
    _, data = event_record(docker_event("health_status: unhealthy"))
    assert data["type"] == "container.health_status" and data["health"] == "unhealthy"
    assert event_record(docker_event("exec_start: sh")) is None
    assert event_record(docker_event("oom"))[1]["type"] == "container.oom"


def test_pull_progress_sums_all_layers():
    progress = PullProgress()
    for line in [
        {"status": "Pulling from faden/x", "id": "2"},
        {"status": "Pulling fs layer", "id": "a"},
        {"status": "Already exists", "id": "b"},
        {"status": "Downloading", "id": "a", "progressDetail": {"current": 50, "total": 200}},
        {"status": "Downloading", "id": "c", "progressDetail": {"current": 10, "total": 100}},
    ]:
        progress.update(line)
    assert progress.figures() == {"bytes_done": 60, "bytes_total": 300, "layers": 3}
    progress.update({"status": "Download complete", "id": "a"})
    progress.update({"status": "Pull complete", "id": "c"})
    assert progress.figures()["bytes_done"] == 300
