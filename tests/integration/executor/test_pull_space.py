"""Pulls onto a small disk: a private dockerd whose data root is a small tmpfs, pulling from
the real registry (through a port into its network namespace)."""

from __future__ import annotations

import fcntl

import docker
import pytest

from tests.support.agentproc import wait_for
from tests.support.executorproc import ensure_random_image, executor_factory, prefix  # noqa: F401
from tests.support.privateengine import PrivateEngine
from tests.support.smallengine import small_engine, used_bytes

pytestmark = pytest.mark.docker

SPACE_REPO = "faden/fx29-space"
SPACE_LAYERS = 3
SPACE_LAYER_BYTES = 40 << 20


@pytest.fixture(scope="module")
def space_image(docker_client, registry) -> str:
    """An image of three layers of random data (120 MiB, as big compressed) in the registry,
    not in the shared engine."""
    with open("/tmp/faden-test-space-image.lock", "w") as lock:  # one builder across xdist workers
        fcntl.flock(lock, fcntl.LOCK_EX)
        ref = ensure_random_image(docker_client, registry, SPACE_REPO, "1", SPACE_LAYERS, SPACE_LAYER_BYTES)
        try:
            docker_client.images.remove(ref, force=True)  # ours: built under this name
        except docker.errors.ImageNotFound:
            pass
    return ref


def pulled_images(engine: PrivateEngine) -> list[str]:
    return engine.docker("images", "-aq").stdout.split()


def test_a_pull_too_big_fails_no_space_before_any_layer(executor_factory, prefix, space_image, registry):
    with small_engine("200m", registry) as engine:
        before = used_bytes(engine)
        agent, ex = executor_factory(docker_host=engine.host)
        done = ex.run(f"{prefix}-pull", "image.pull", {"image": space_image}, timeout_s=60)
        assert (done["state"], done["reason"]) == ("failed", "no_space"), done
        # 120 MiB of layers, three times that plus the margin: more than the 200 MiB disk
        assert done["needed_bytes"] >= 3 * SPACE_LAYERS * SPACE_LAYER_BYTES, done
        assert 0 < done["free_bytes"] <= 200 << 20 and done["free_bytes"] < done["needed_bytes"], done
        assert (
            f"{done['needed_bytes']} bytes" in done["message"] and f"{done['free_bytes']} are free" in done["message"]
        )
        run = ex.run(f"{prefix}-run", "container.run", {"name": f"{prefix}-c", "image": space_image}, timeout_s=60)
        assert (run["state"], run["reason"]) == ("failed", "no_space"), run
        # nothing was fetched: no pull progress, no image, not a byte more on the disk
        assert not [r for r in ex.timeline(f"{prefix}-pull") if r["data"].get("phase") == "pull"]
        assert pulled_images(engine) == []
        assert used_bytes(engine) - before < 1 << 20


def test_a_pull_that_fills_the_disk_part_way_ends_no_space_and_leaves_it_as_before(
    executor_factory, prefix, space_image, registry
):
    with small_engine("100m", registry) as engine:
        before = used_bytes(engine)
        agent, ex = executor_factory(docker_host=engine.host, pull_space_factor=0)  # no check first
        done = ex.run(f"{prefix}-pull", "image.pull", {"image": space_image}, timeout_s=120)
        assert (done["state"], done["reason"]) == ("failed", "no_space"), done
        assert "no space left on device" in done["message"]
        assert pulled_images(engine) == []
        # The engine removes the cut layer's files a moment after it answers: wait for that.
        wait_for(lambda: used_bytes(engine) - before < 1 << 20, 15, what=f"the disk back to {before} bytes used")


def test_a_pull_that_fits_succeeds_and_counts_only_the_layers_the_engine_lacks(
    executor_factory, prefix, space_image, registry
):
    with small_engine("700m", registry) as engine:
        agent, ex = executor_factory(docker_host=engine.host)
        done = ex.run(f"{prefix}-pull", "image.pull", {"image": space_image}, timeout_s=120)
        assert done["state"] == "succeeded", done
        # held now: a pull again needs nothing, even with a factor no disk could meet
        agent.stop()
        agent, ex = executor_factory(docker_host=engine.host, pull_space_factor=1e9)
        again = ex.run(f"{prefix}-again", "image.pull", {"image": space_image}, timeout_s=60)
        assert again["state"] == "succeeded", again
