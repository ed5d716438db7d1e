"""Bind sources nobody but root can swap (docs/commands.md, Host policy): every directory on
the way owned by root and writable by root alone, none inside a directory a container binds
writable, and no writable bind holding another container's source; each refusal names its rule."""

from __future__ import annotations

import json
import os

import pytest

from faden_agent.config import load_config
from faden_agent.workers.executor.bind_paths import Bind
from faden_agent.workers.executor.host_policy import PolicyDenied, load_policy

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="ownership is judged against root: run as root")


def policy_allowing(tmp_path, *allowed):
    path = tmp_path / "policy.json"
    path.write_text(json.dumps({"allow_bind": [str(a) for a in allowed]}))
    env = {
        "FADEN_NODE_AGENT_POLICY_FILE": str(path),
        "FADEN_NODE_AGENT_STATE_PATH": str(tmp_path / "state" / "state.json"),
        "FADEN_NODE_AGENT_RUNTIME_DIR": str(tmp_path / "run"),
        "FADEN_NODE_AGENT_RAY_LOG_DIR": str(tmp_path / "ray"),
    }
    return load_policy(load_config(env))


def spec(*sources, read_only=False, **extra):
    mounts = [
        {"type": "bind", "source": str(s), "target": f"/m{i}", "read_only": read_only} for i, s in enumerate(sources)
    ]
    return {"name": "victim", "mounts": mounts, **extra}


def refusal(policy, asked, binds=None) -> str:
    with pytest.raises(PolicyDenied) as caught:
        policy.admit(asked, binds)
    message = str(caught.value)
    assert "\n" not in message
    return message


def test_a_directory_on_the_way_that_others_can_write_is_refused(tmp_path):
    models = tmp_path / "models"
    (models / "team" / "llama").mkdir(parents=True)
    policy = policy_allowing(tmp_path, models)
    assert policy.admit(spec(models / "team" / "llama"), [])["mounts"][0]["source"] == str(models / "team" / "llama")

    os.chmod(models / "team", 0o777)  # anyone may rename llama away and put a symlink there
    message = refusal(policy, spec(models / "team" / "llama"))
    assert message.startswith("rule root_owned: mounts[0].source")
    assert f"{models / 'team'} (owner uid 0, mode 0777)" in message
    os.chmod(models / "team", 0o775)  # a group of users
    assert refusal(policy, spec(models / "team" / "llama")).startswith("rule root_owned:")
    os.chmod(models / "team", 0o755)
    os.chown(models / "team", 1000, 1000)  # a user's own directory
    assert "owner uid 1000" in refusal(policy, spec(models / "team" / "llama"))
    os.chown(models / "team", 0, 0)
    os.chmod(models, 0o777)  # an ancestor above the source: the same
    assert f"{models} (owner uid 0, mode 0777)" in refusal(policy, spec(models / "team" / "llama"))
    assert f"{models} (owner uid 0" in refusal(policy, spec(models / "team"))
    policy.admit(spec(models), [])  # the source itself may be anyone's to write into

    # a sticky directory (like /tmp, /dev/shm): only the owner of an entry may replace it
    os.chmod(models, 0o1777)
    policy.admit(spec(models / "team" / "llama"), [])
    os.chown(models / "team", 1000, 1000)
    assert "owner uid 0, mode 1777" in refusal(policy, spec(models / "team" / "llama"))


def test_a_source_inside_a_directory_a_container_binds_writable_is_refused(tmp_path):
    cache = tmp_path / "cache"
    (cache / "sub").mkdir(parents=True)
    policy = policy_allowing(tmp_path, cache)
    tenant = [Bind("tenant", str(cache), True)]
    message = refusal(policy, spec(cache / "sub"), tenant)
    assert message == (
        f"rule shared_bind: mounts[0].source '{cache / 'sub'}' is inside {cache}, which container tenant binds "
        "writable: a tenant there can swap it before the engine mounts it; bind the shared directory itself"
    )
    assert refusal(policy, spec(cache / "sub", read_only=True), tenant).startswith("rule shared_bind:")
    policy.admit(spec(cache), tenant)  # the shared cache bound as its root, beside the tenant
    policy.admit(spec(cache / "sub"), [Bind("reader", str(cache), False)])  # it cannot write there
    policy.admit(spec(cache / "sub"))  # when the command arrives: judged again with the engine's containers

    # its own binds count the same: one writable bind inside another of the spec
    own = spec(cache, cache / "sub")
    assert "which container victim binds writable" in refusal(policy, own, [])
    policy.admit({**own, "mounts": [{**own["mounts"][0], "read_only": True}, own["mounts"][1]]}, [])


def test_a_writable_bind_may_not_hold_another_containers_source(tmp_path):
    cache = tmp_path / "cache"
    (cache / "sub").mkdir(parents=True)
    policy = policy_allowing(tmp_path, cache)
    other = [Bind("model-server", str(cache / "sub"), False)]
    message = refusal(policy, spec(cache), other)
    assert message.startswith(f"rule shared_bind: mounts[0].source '{cache}' (resolved {cache}) is bound writable")
    assert f"holds {cache / 'sub'}, which container model-server binds" in message
    policy.admit(spec(cache, read_only=True), other)


def test_ipc_host_writes_the_hosts_dev_shm(tmp_path):
    policy = policy_allowing(tmp_path, "/dev/shm")
    shm_dir = "/dev/shm/" + tmp_path.name
    os.mkdir(shm_dir)
    try:
        ray = [Bind("ray-head", "/dev/shm", True)]  # what ipc_mode host gives a container
        assert "which container ray-head binds writable" in refusal(policy, spec(shm_dir), ray)
        policy.admit(spec("/dev/shm", ipc_mode="host"), ray)  # the same /dev/shm: no swap possible
        held = [Bind("other", shm_dir, False)]
        message = refusal(policy, {"name": "victim", "ipc_mode": "host", "mounts": []}, held)
        assert message.startswith("rule shared_bind: ipc_mode host (resolved /dev/shm) is bound writable")
    finally:
        os.rmdir(shm_dir)


def test_a_symlink_in_a_tenants_directory_is_refused_even_when_it_points_somewhere_allowed(tmp_path):
    models, scratch = tmp_path / "models", tmp_path / "scratch"
    (models / "llama").mkdir(parents=True)
    scratch.mkdir()
    (scratch / "link").symlink_to(models / "llama")  # the tenant may re-point it at /run any time
    policy = policy_allowing(tmp_path, models)
    policy.admit(spec(scratch / "link"), [])  # the operator's symlink, above the allowed directory
    message = refusal(policy, spec(scratch / "link"), [Bind("tenant", str(scratch), True)])
    assert message.startswith(f"rule shared_bind: mounts[0].source '{scratch / 'link'}' is inside {scratch}")


def test_a_path_outside_every_allowed_directory_is_refused_by_allow_bind_first(tmp_path):
    home = tmp_path / "home" / "alice"
    (home / "models").mkdir(parents=True)
    os.chown(home, 1000, 1000)
    policy = policy_allowing(tmp_path, tmp_path / "models")
    assert refusal(policy, spec(home / "models")).startswith("rule allow_bind: mounts[0].source")
