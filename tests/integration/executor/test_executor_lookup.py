"""Exact container lookup, the real executor on the real engine: a command naming `cafe`
when no container is named so acts on none, not on whichever container's ID starts with
`cafe` (the engine falls back to an ID prefix)."""

from __future__ import annotations

import pytest

from tests.conftest import TEST_IMAGE
from tests.support.executorproc import executor_factory, prefix  # noqa: F401

pytestmark = pytest.mark.docker


@pytest.mark.parametrize(
    "kind, spec",
    [
        ("container.stop", {"timeout_s": 0}),
        ("container.restart", {"timeout_s": 0}),
        ("container.remove", {}),
    ],
)
def test_a_name_that_is_only_an_id_prefix_finds_nothing(executor_factory, prefix, docker_client, kind, spec):
    agent, ex = executor_factory()
    victim = f"{prefix}-victim"
    assert (
        ex.run(f"{prefix}-run", "container.run", {"name": victim, "image": TEST_IMAGE, "command": ["sleep", "300"]})[
            "state"
        ]
        == "succeeded"
    )
    container = docker_client.containers.get(victim)
    id_prefix = container.id[:8]  # like `cafe`: no container is named so
    done = ex.run(f"{prefix}-cmd", kind, {"name": id_prefix, **spec})
    if kind == "container.remove":
        assert done["state"] == "succeeded" and done["result"]["already_absent"] is True, done
    else:
        assert (done["state"], done["reason"]) == ("failed", "not_found"), done
    container.reload()
    assert container.status == "running" and container.attrs["RestartCount"] == 0
    assert container.attrs["State"]["StartedAt"] == docker_client.containers.get(victim).attrs["State"]["StartedAt"]


def test_a_run_named_like_an_id_prefix_creates_its_own_container(executor_factory, prefix, docker_client):
    agent, ex = executor_factory()
    victim = f"{prefix}-victim"
    assert (
        ex.run(f"{prefix}-run", "container.run", {"name": victim, "image": TEST_IMAGE, "command": ["sleep", "300"]})[
            "state"
        ]
        == "succeeded"
    )
    original = docker_client.containers.get(victim)
    id_prefix = original.id[:8]
    try:
        done = ex.run(
            f"{prefix}-run2",
            "container.run",
            {"name": id_prefix, "image": TEST_IMAGE, "replace": True, "command": ["sleep", "300"]},
        )
        assert done["state"] == "succeeded" and done["result"]["container_id"] != original.id, done
        assert docker_client.containers.get(victim).id == original.id  # not replaced
    finally:
        for container in docker_client.containers.list(all=True, filters={"name": f"^/{id_prefix}$"}):
            container.remove(force=True)
