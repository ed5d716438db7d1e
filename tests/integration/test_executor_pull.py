"""Pulls from the real local registry: progress records, missing images, cancellation."""

from __future__ import annotations

import itertools

import pytest

from faden_agent import protocol
from tests.agentproc import wait_for
from tests.executorproc import big_image, executor_factory, prefix  # noqa: F401

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
