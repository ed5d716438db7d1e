"""Pulls from the real local registry: progress records, missing images, cancellation."""

from __future__ import annotations

import itertools

import pytest

from faden_agent import protocol
from tests.support.agentproc import wait_for
from tests.support.executorproc import big_image, executor_factory, prefix  # noqa: F401
from tests.support.silentserver import SilentServer

pytestmark = pytest.mark.docker


def pull_progress(ex, command_id):
    return [r["data"] for r in ex.timeline(command_id) if r["data"]["state"] == protocol.PROGRESS]


def test_pull_reports_progress_over_all_layers(executor_factory, prefix, big_image, docker_client):
    agent, ex = executor_factory()
    done = ex.run(f"{prefix}-pull", "image.pull", {"image": big_image}, timeout_s=120)
    assert done["state"] == "succeeded", done
    assert done["result"]["image_id"] == docker_client.images.get(big_image).id
    progress = pull_progress(ex, f"{prefix}-pull")
    assert len(progress) >= 2
    final = progress[-1]
    assert final["bytes_total"] >= 4 * 128 * 1024 * 1024 and final["bytes_done"] == final["bytes_total"]
    assert final["layers"] >= 4
    done_values = [p["bytes_done"] for p in progress]
    assert done_values == sorted(done_values)  # monotonic
    # at most about once a second: records are spaced by the pull's duration
    records = [r for r in ex.timeline(f"{prefix}-pull") if r["data"]["state"] == protocol.PROGRESS]
    gaps = [b["ts"] - a["ts"] for a, b in itertools.pairwise(records[1:-1])]
    assert all(gap >= 0.9 for gap in gaps), gaps


def test_pull_of_a_missing_image_fails_with_image_not_found(executor_factory, prefix, registry):
    agent, ex = executor_factory()
    done = ex.run(f"{prefix}-missing", "image.pull", {"image": f"{registry}/faden/does-not-exist:1"})
    assert (done["state"], done["reason"]) == ("failed", "image_not_found"), done
    run = ex.run(
        f"{prefix}-run", "container.run", {"name": f"{prefix}-c", "image": f"{registry}/faden/does-not-exist:1"}
    )
    assert (run["state"], run["reason"]) == ("failed", "image_not_found"), run


def test_run_pulls_a_missing_image_first(executor_factory, prefix, registry, docker_client):
    agent, ex = executor_factory()
    image = f"{registry}/faden/busybox:2"
    try:
        docker_client.images.remove(image)
    except Exception:  # noqa: BLE001 - not there: fine
        pass
    done = ex.run(f"{prefix}-run", "container.run", {"name": f"{prefix}-c", "image": image, "command": ["sleep", "30"]})
    assert done["state"] == "succeeded", done
    assert any(p.get("phase") == "pull" for p in pull_progress(ex, f"{prefix}-run"))


def test_cancel_a_running_pull(executor_factory, prefix, big_image):
    agent, ex = executor_factory()
    ex.send(f"{prefix}-pull", "image.pull", {"image": big_image})
    wait_for(lambda: any(p["bytes_done"] > 0 for p in pull_progress(ex, f"{prefix}-pull")), 60, what="pull progress")
    cancel = ex.run(f"{prefix}-cancel", "command.cancel", {"command_id": f"{prefix}-pull"})
    assert cancel["state"] == "succeeded", cancel
    done = ex.wait_terminal(f"{prefix}-pull", 30)
    assert (done["state"], done["reason"]) == ("cancelled", "cancelled"), done
    late = ex.run(f"{prefix}-cancel2", "command.cancel", {"command_id": f"{prefix}-pull"})
    assert (late["state"], late["reason"]) == ("failed", "not_found")


def test_an_idle_executor_meets_a_short_deadline(executor_factory, prefix):
    """An idle executor checks deadlines only with its slow "alive" beat (here every 20 s);
    a new job brings the check forward to 0.25 s, so a 1 s deadline is not enforced up to
    20 s late."""
    registry = SilentServer.tcp()  # a registry whose server hangs
    try:
        agent, ex = executor_factory(worker_liveness_sec=20, worker_hang_timeout_sec=120, docker_timeout_sec=30)
        agent.wait_all_running()
        done = ex.run(
            f"{prefix}-late",
            "image.pull",
            {"image": f"127.0.0.1:{registry.port}/hung/image:1", "deadline_s": 1},
            timeout_s=10,
        )
        assert (done["state"], done["reason"]) == ("failed", "timeout"), done
        assert registry.held, "the pull never reached the silent registry"
        rows = {r["data"]["state"]: r["ts"] for r in ex.timeline(f"{prefix}-late")}
        assert rows["failed"] - rows["received"] < 6, rows  # 1 s deadline + a tick + a loaded machine
    finally:
        registry.close()
