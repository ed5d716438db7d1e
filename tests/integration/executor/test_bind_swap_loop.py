"""A tenant container swaps a subdirectory of its writable cache for a symlink to the host's
/run in a loop, while container.run specs bind that subdirectory through a real agent on the
real engine: every one is refused with the rule named, none ever mounts the host's /run, and
the cache bound as its root still runs beside the loop (docs/commands.md, Host policy)."""

from __future__ import annotations

import time

import pytest

from faden_agent import protocol
from tests.conftest import TEST_IMAGE
from tests.support.executorproc import executor_factory, prefix  # noqa: F401

pytestmark = pytest.mark.docker

SPECS = 12
# Mostly a directory (so most specs pass the check on arrival), a symlink to /run between.
SWAP_LOOP = "while :; do rm -f /c/sub; mkdir /c/sub; usleep 20000; rmdir /c/sub; ln -s /run /c/sub; done"
WATCH = "if [ -S /x/docker.sock ] || [ -e /x/docker ]; then echo HOST-RUN; fi; sleep 300"


def test_a_swap_loop_in_a_tenants_cache_never_mounts_the_hosts_run(executor_factory, prefix, docker_client, tmp_path):
    cache = tmp_path / "cache"
    (cache / "sub").mkdir(parents=True)
    policy = tmp_path / "policy.json"
    policy.write_text(f'{{"allow_bind": ["{cache}"]}}')
    agent, ex = executor_factory(policy_file=policy)
    tenant = docker_client.containers.run(
        TEST_IMAGE, ["sh", "-c", SWAP_LOOP], name=f"{prefix}-tenant", detach=True, volumes={str(cache): {"bind": "/c"}}
    )
    started = time.monotonic()
    for i in range(SPECS):
        mount = {"source": str(cache / "sub"), "target": "/x", "read_only": i % 2 == 1}
        ex.send(f"swap-{i}", "container.run", {"name": f"{prefix}-victim-{i}", "image": TEST_IMAGE,
                                                "command": ["sh", "-c", WATCH], "mounts": [mount]})  # fmt: skip
    outcomes = [ex.wait_terminal(f"swap-{i}", 120) for i in range(SPECS)]
    took = time.monotonic() - started

    by_rule: dict[str, int] = {}
    for done in outcomes:
        assert done["reason"] == "policy_denied", done
        rule = done["message"].split("rule ", 1)[1].split(":", 1)[0]
        by_rule[rule] = by_rule.get(rule, 0) + 1
        if done["state"] == protocol.FAILED:  # passed on arrival (a directory then): the engine's view refuses it
            assert rule == "shared_bind" and f"which container {prefix}-tenant binds writable" in done["message"]
        else:  # on arrival: the path was a symlink or gone at that moment
            assert done["state"] == protocol.REJECTED and rule == "allow_bind", done
    print(f"{SPECS} specs beside the swap loop in {took:.1f} s, refused by rule: {by_rule}")
    assert by_rule.get("shared_bind", 0) > 0  # the loop is mostly a directory: most pass on arrival
    assert not docker_client.containers.list(all=True, filters={"name": f"{prefix}-victim-"})
    tenant.reload()
    assert tenant.status == "running"  # the loop ran throughout

    # the shared cache bound as its root runs beside the loop
    shared = [{"source": str(cache), "target": "/cache"}]
    done = ex.run(
        "root",
        "container.run",
        {"name": f"{prefix}-shared", "image": TEST_IMAGE, "command": ["sleep", "300"], "mounts": shared},
    )
    assert done["state"] == protocol.SUCCEEDED, done
    mounts = docker_client.api.inspect_container(f"{prefix}-shared")["Mounts"]
    assert [(m["Source"], m["RW"]) for m in mounts if m["Type"] == "bind"] == [(str(cache), True)]
