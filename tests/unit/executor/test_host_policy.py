"""The host policy (docs/commands.md, Host policy): real paths, symlinks and policy files."""

from __future__ import annotations

import os

import pytest

from faden_agent.config import load_config
from faden_agent.workers.executor.host_policy import PolicyDenied, PolicyFileError, load_policy, policy_or_refusal
from tests.support.hostpaths import HOST_PATHS


def config_for(tmp_path, policy=None):
    env = {
        "FADEN_NODE_AGENT_RAY_LOG_DIR": str(tmp_path / "ray"),
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


def test_the_defaults_allow_only_the_ray_directory_the_models_cache_and_dev_shm(tmp_path):
    config = config_for(tmp_path)
    policy = load_policy(config)
    for source in HOST_PATHS:
        message = refusal(policy, bind(source))
        assert message.startswith("rule allow_bind: mounts[0].source"), message
    assert "the host's policy file may name it" in refusal(policy, bind("/usr"))
    config.ray_log_dir.mkdir(parents=True)
    (config.ray_log_dir / "job").mkdir()
    admitted = policy.admit({**bind("/dev/shm/"), "gpus": "all"})
    assert admitted["mounts"][0]["source"] == "/dev/shm"  # Docker gets the resolved path
    assert policy.admit(bind(f"{config.ray_log_dir}/../ray/job"))["mounts"][0]["source"] == str(
        config.ray_log_dir / "job"
    )


def test_a_symlink_at_or_below_an_allowed_directory_is_refused_and_errors_are_refusals(tmp_path):
    models = tmp_path / "models"
    (models / "real").mkdir(parents=True)
    (models / "link").symlink_to(models / "real")  # even one that stays inside
    (models / "to-run").symlink_to("/run")
    (tmp_path / "alias").symlink_to(models)
    policy = load_policy(config_for(tmp_path, f'{{"allow_bind": ["{models}"]}}'))
    assert "is a symlink inside an allowed directory" in refusal(policy, bind(str(models / "link")))
    assert "is a symlink inside an allowed directory" in refusal(policy, bind(str(models / "to-run" / "docker")))
    # a symlink above the allowed directory is the operator's (resolved, then judged)
    assert policy.admit(bind(str(tmp_path / "alias" / "real")))["mounts"][0]["source"] == str(models / "real")
    assert "cannot be read: No such file or directory" in refusal(policy, bind(str(models / "gone")))
    assert "is not an absolute path" in refusal(policy, bind("models"))
    assert "inside none of the allowed directories" in refusal(policy, bind(str(tmp_path)))  # holds one


def test_protected_paths_narrow_what_a_policy_file_allows(tmp_path):
    (tmp_path / "state").mkdir()
    (tmp_path / "conf").mkdir()
    policy = load_policy(config_for(tmp_path, '{"allow_bind": ["/"]}'))  # every symlink is then refused
    for source, protected in [
        ("/", "/etc"),  # allowing / holds every protected path below it
        ("/run/docker.sock", "/run/docker.sock"),
        ("/etc/", "/etc"),  # trailing slash
        ("/etc/passwd", "/etc"),  # inside
        ("/tmp/../etc", "/etc"),  # `..`
        ("/root", "/root"),
        ("/var", "/var/lib/docker"),  # a parent of a protected path
        (str(tmp_path / "state"), str(tmp_path / "state")),  # the agent's own state
        (str(tmp_path / "conf"), str(tmp_path / "conf" / "agent.env")),  # may hold the token
        (str(tmp_path), str(tmp_path / "state")),  # the parent of all
    ]:
        message = refusal(policy, bind(source))
        assert message.startswith("rule protected_paths: mounts[0].source"), message
        assert f"the protected path {protected}" in message, (source, message)


def test_the_defaults_admit_a_ray_and_vllm_shaped_container(tmp_path):
    models = tmp_path / "mnt" / "models"
    (models / "llama").mkdir(parents=True)
    config = config_for(tmp_path, f'{{"allow_bind": ["/dev/shm", "{models}"]}}')
    config.ray_log_dir.mkdir(parents=True)
    load_policy(config).admit(
        {
            "gpus": "all",
            "network_mode": "host",
            "ipc_mode": "host",
            "shm_size": 10 * 2**30,
            "cap_add": ["IPC_LOCK", "CAP_SYS_NICE"],
            "devices": ["/dev/infiniband/uverbs0"],
            "mounts": [
                {"type": "bind", "source": f"{models}/llama/", "target": "/models"},
                {"type": "bind", "source": "/dev/shm", "target": "/dev/shm"},
                {"type": "bind", "source": str(config.ray_log_dir), "target": "/tmp/ray"},
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
    (tmp_path / "srv" / "secrets").mkdir(parents=True)
    policy = load_policy(
        config_for(
            tmp_path,
            f'{{"allow_bind": ["/var/run/docker.sock", "{tmp_path}/srv", "/var"], "capabilities": ["SYS_ADMIN"],'
            f' "host_network": false, "protected_paths": ["{tmp_path}/srv/secrets"], "privileged": true}}',
        )
    )
    policy.admit({"privileged": True, "cap_add": ["SYS_ADMIN"], **bind("/run/docker.sock")})
    assert refusal(policy, {"network_mode": "host"}).startswith("rule host_network:")
    assert refusal(policy, {"cap_add": ["IPC_LOCK"]}).startswith("rule capabilities:")  # the list replaces
    assert f"the protected path {tmp_path}/srv/secrets" in refusal(policy, bind(f"{tmp_path}/srv/secrets"))
    assert "holds the protected path" in refusal(policy, bind(f"{tmp_path}/srv"))
    (tmp_path / "srv" / "data").mkdir()
    policy.admit(bind(f"{tmp_path}/srv/data"))
    assert "the protected path /var/lib/docker" in refusal(policy, bind("/var/lib/docker"))  # built-ins stay
    assert "rule allow_bind" in refusal(policy, bind("/dev/shm"))  # the list replaces the defaults


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
