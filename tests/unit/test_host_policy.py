"""The host policy (docs/commands.md, Host policy): real paths, symlinks and policy files."""

from __future__ import annotations

import os

import pytest

from faden_agent.config import load_config
from faden_agent.workers.executor.host_policy import PolicyDenied, PolicyFileError, load_policy, policy_or_refusal


def config_for(tmp_path, policy=None):
    env = {
        "FADEN_NODE_AGENT_STATE_PATH": str(tmp_path / "state" / "state.json"),
        "FADEN_NODE_AGENT_RUNTIME_DIR": str(tmp_path / "run"),
        "FADEN_NODE_AGENT_ENV_FILE": str(tmp_path / "conf" / "agent.env"),
    }
    if policy is not None:
        path = tmp_path / "policy.json"
        path.write_text(policy)
        env["FADEN_NODE_AGENT_POLICY_FILE"] = str(path)
    return load_config(env)


def bind(source: str) -> dict:
    return {"mounts": [{"type": "bind", "source": source, "target": "/x", "read_only": False}]}


def refusal(policy, spec) -> str:
    with pytest.raises(PolicyDenied) as caught:
        policy.admit(spec)
    assert "\n" not in str(caught.value)
    return str(caught.value)


def test_the_defaults_refuse_the_host_s_keys_however_the_path_is_spelled(tmp_path):
    policy = load_policy(config_for(tmp_path))
    (tmp_path / "state").mkdir()
    (tmp_path / "to-etc").symlink_to("/etc")
    (tmp_path / "to-sock").symlink_to("/var/run/docker.sock")
    for source, protected in [
        ("/", "/"),
        ("/var/run/docker.sock", "/run/docker.sock"),
        (str(tmp_path / "to-sock"), "/run/docker.sock"),  # a symlink to the socket
        ("/etc/", "/etc"),  # trailing slash
        ("/etc/passwd", "/etc"),  # inside
        ("/tmp/../etc", "/etc"),  # `..`
        (str(tmp_path / "to-etc") + "/ssh", "/etc"),  # a symlinked parent
        ("/root/.ssh", "/root"),
        ("/var", "/var/lib/docker"),  # a parent of a protected path
        (str(tmp_path / "state"), str(tmp_path / "state")),  # the agent's own state
        (str(tmp_path / "run" / "x"), str(tmp_path / "run")),  # and runtime directory
        (str(tmp_path / "conf" / "agent.env"), str(tmp_path / "conf" / "agent.env")),  # may hold the token
        (str(tmp_path), str(tmp_path / "state")),  # the parent of all
    ]:
        message = refusal(policy, bind(source))
        assert message.startswith("rule protected_paths: mounts[0].source"), message
        assert f"the protected path {protected}" in message, (source, message)


def test_the_defaults_admit_a_ray_and_vllm_shaped_container(tmp_path):
    policy = load_policy(config_for(tmp_path))
    policy.admit(
        {
            "gpus": "all",
            "network_mode": "host",
            "ipc_mode": "host",
            "shm_size": 10 * 2**30,
            "cap_add": ["IPC_LOCK", "CAP_SYS_NICE"],
            "devices": ["/dev/infiniband/uverbs0"],
            "mounts": [
                {"type": "bind", "source": "/root/.cache/huggingface", "target": "/root/.cache/huggingface"},
                {"type": "bind", "source": "/mnt/models/llama/", "target": "/models"},
                {"type": "bind", "source": "/dev/shm", "target": "/dev/shm"},
                {"type": "bind", "source": "/tmp/ray", "target": "/tmp/ray"},
                {"type": "volume", "source": "etc", "target": "/etc/x"},  # a named volume, not a host path
            ],
        }
    )


def test_privileged_capabilities_and_devices_name_their_rule(tmp_path):
    policy = load_policy(config_for(tmp_path))
    assert refusal(policy, {"privileged": True}).startswith("rule privileged:")
    assert "rule capabilities: cap_add 'SYS_ADMIN'" in refusal(policy, {"cap_add": ["SYS_ADMIN"]})
    (tmp_path / "disk").symlink_to("/dev/null")  # like /dev/disk/by-id/… -> /dev/sda
    message = refusal(policy, {"devices": [f"{tmp_path / 'disk'}:/dev/xvda"]})
    assert message.startswith("rule devices: devices[0]") and "(resolved /dev/null)" in message
    policy.admit({"privileged": False, "cap_add": [], "devices": ["/dev/nvidia0"]})


def test_a_policy_file_widens_and_narrows(tmp_path):
    policy = load_policy(
        config_for(
            tmp_path,
            '{"allow_bind": ["/var/run/docker.sock"], "capabilities": ["SYS_ADMIN"], "host_network": false,'
            ' "protected_paths": ["/srv/secrets"], "privileged": true}',
        )
    )
    policy.admit({"privileged": True, "cap_add": ["SYS_ADMIN"], **bind("/run/docker.sock")})
    assert refusal(policy, {"network_mode": "host"}).startswith("rule host_network:")
    assert refusal(policy, {"cap_add": ["IPC_LOCK"]}).startswith("rule capabilities:")  # the list replaces
    assert "the protected path /srv/secrets" in refusal(policy, bind("/srv/secrets/key"))
    assert "the protected path /etc" in refusal(policy, bind("/etc"))  # built-ins stay protected


@pytest.mark.parametrize(
    "content, problem",
    [
        ("{", "not JSON"),
        ("[]", "must be a JSON object"),
        ('{"privilegd": true}', "unknown keys"),
        ('{"privileged": "yes"}', "privileged must be true or false"),
        ('{"allow_bind": "/etc"}', "allow_bind must be a list"),
        ('{"protected_paths": ["etc"]}', "takes absolute paths"),
        ("x" * 70_000, "larger than"),
    ],
)
def test_a_bad_policy_file_is_one_line_naming_the_file(tmp_path, content, problem):
    config = config_for(tmp_path, content)
    with pytest.raises(PolicyFileError) as caught:
        load_policy(config)
    message = str(caught.value)
    assert message.startswith(f"FADEN_NODE_AGENT_POLICY_FILE={tmp_path / 'policy.json'}: ") and problem in message
    assert "\n" not in message
    refused = refusal(policy_or_refusal(config), {})  # the executor refuses every container
    assert refused.startswith("rule policy_file: ") and problem in refused


def test_a_missing_or_unreadable_policy_file(tmp_path):
    config = config_for(tmp_path, "{}")
    os.unlink(config.policy_file)
    with pytest.raises(PolicyFileError, match="cannot be read"):
        load_policy(config)
    os.mkfifo(config.policy_file)  # refused at once: reading it would block the executor
    with pytest.raises(PolicyFileError, match="not a regular file"):
        load_policy(config)
