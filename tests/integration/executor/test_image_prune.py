"""image.prune against a private dockerd (never the shared engine's images) on a tmpfs data
root: what it frees, and every image it must keep."""

from __future__ import annotations

import uuid

import pytest

from tests.conftest import TEST_IMAGE
from tests.support.executorproc import executor_factory, prefix  # noqa: F401
from tests.support.privateengine import PrivateEngine
from tests.support.smallengine import free_bytes, small_engine

pytestmark = pytest.mark.docker


def commit(engine: PrivateEngine, tag: str, mib: int) -> str:
    """A new image: the test image plus `mib` MiB of random data; returns its id."""
    maker = f"mk-{uuid.uuid4().hex[:8]}"
    engine.docker(
        "run", "--network", "none", "--name", maker, TEST_IMAGE, "sh", "-c", f"head -c {mib}m /dev/urandom >/b"
    )
    engine.docker("commit", maker, tag)
    engine.docker("rm", maker)
    return image_id(engine, tag)


def image_id(engine: PrivateEngine, reference: str) -> str:
    return engine.docker("image", "inspect", "--format", "{{.Id}}", reference).stdout.strip()


def test_prune_frees_unused_images_and_keeps_every_used_and_kept_one(executor_factory, prefix):
    with small_engine("400m", image=TEST_IMAGE) as engine:
        unused = commit(engine, "fx/unused:1", 4)
        engine.docker("tag", "fx/unused:1", "fx/unused:2")  # two names: each must go
        dangling = commit(engine, "fx/dangle:1", 3)
        dangle_new = commit(engine, "fx/dangle:1", 3)  # the first one is dangling now
        kept = commit(engine, "fx/kept:1", 2)
        stopped = commit(engine, "fx/stopped:1", 1)
        managed = commit(engine, "fx/managed:1", 1)
        engine.docker("create", "--network", "none", "fx/stopped:1", "true")  # never started, not ours
        engine.docker("run", "-d", "--network", "none", TEST_IMAGE, "sleep", "300")  # running, not ours
        agent, ex = executor_factory(docker_host=engine.host)
        run = ex.run(
            f"{prefix}-run",
            "container.run",
            {"name": f"{prefix}-m", "image": "fx/managed:1", "command": ["sleep", "300"], "network_mode": "none"},
        )
        assert run["state"] == "succeeded", run
        base = image_id(engine, TEST_IMAGE)
        free_before = free_bytes(engine)

        done = ex.run(f"{prefix}-prune", "image.prune", {"keep": ["fx/kept:1", "fx/absent:9"]}, timeout_s=120)

        assert done["state"] == "succeeded", done
        result = done["result"]
        assert {r["image_id"] for r in result["removed"]} == {unused, dangling, dangle_new}, result
        assert sorted(next(r["tags"] for r in result["removed"] if r["image_id"] == unused)) == [
            "fx/unused:1",
            "fx/unused:2",
        ]
        assert result["refused"] == [] and result["keep_absent"] == ["fx/absent:9"] and result["kept"] == [kept]
        left = set(engine.docker("images", "-q", "--no-trunc").stdout.split())
        assert {kept, stopped, managed, base} <= left and not {unused, dangling, dangle_new} & left
        assert result["bytes_freed"] >= 10 << 20, result  # 4 + 3 + 3 MiB of random data
        assert free_bytes(engine) - free_before >= 10 << 20
        again = ex.run(f"{prefix}-again", "image.prune", {}, timeout_s=120)  # nothing kept: kept:1 goes now
        assert {r["image_id"] for r in again["result"]["removed"]} == {kept}, again


def test_prune_refuses_a_keep_list_that_is_no_list_of_references(executor_factory, prefix):
    agent, ex = executor_factory(docker_host="unix:///nonexistent/docker.sock")  # never the shared engine
    for keep in ["fx/kept:1", [""], [7], ["x"] * 257]:
        done = ex.run(f"{prefix}-{uuid.uuid4().hex[:6]}", "image.prune", {"keep": keep})
        assert (done["state"], done["reason"]) == ("rejected", "invalid_spec"), done
        assert "'keep'" in done["message"] or '"keep"' in done["message"]


def test_prune_spares_the_image_of_a_command_waiting_in_a_queue(executor_factory, prefix):
    with small_engine("200m", image=TEST_IMAGE) as engine:
        waiting = commit(engine, "fx/next-runtime:1", 1)
        unused = commit(engine, "fx/old-runtime:1", 1)
        agent, ex = executor_factory(docker_host=engine.host)
        name = f"{prefix}-ray"
        never_healthy = {"test": ["CMD", "false"], "interval_s": 1, "retries": 1000}
        first = {"name": name, "image": TEST_IMAGE, "command": ["sleep", "300"], "network_mode": "none"}
        ex.send(f"{prefix}-first", "container.run", {**first, "healthcheck": never_healthy, "deadline_s": 60})
        # the runtime switch waits behind it, in the same container's queue
        ex.send(f"{prefix}-switch", "container.run", {**first, "image": "fx/next-runtime:1", "replace": True})
        done = ex.run(f"{prefix}-prune", "image.prune", {}, timeout_s=60)
        assert done["state"] == "succeeded", done
        assert {r["image_id"] for r in done["result"]["removed"]} == {unused}, done
        assert image_id(engine, "fx/next-runtime:1") == waiting
        ex.run(f"{prefix}-cancel", "command.cancel", {"command_id": f"{prefix}-first"})
        switched = ex.wait_terminal(f"{prefix}-switch", 60)
        assert switched["state"] == "succeeded", switched
