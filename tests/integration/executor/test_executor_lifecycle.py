"""The executor against the real Docker engine: commands handed over its real REQ socket
exactly as the stream worker hands them, outcomes read from the real outbox file, effects
checked with `docker inspect`."""

from __future__ import annotations

import pytest

from faden_agent import protocol
from tests.conftest import TEST_IMAGE
from tests.support.agentproc import wait_for
from tests.support.executorproc import executor_factory, executor_pid, prefix  # noqa: F401
from tests.support.ports import free_port

pytestmark = pytest.mark.docker


def test_run_with_options_then_stop_start_restart_remove(executor_factory, prefix, docker_client, tmp_path):
    host_dir = tmp_path / "data"
    host_dir.mkdir()
    policy = tmp_path / "policy.json"
    policy.write_text(f'{{"allow_bind": ["{host_dir}"]}}')  # bind sources are the host's to allow
    agent, ex = executor_factory(policy_file=policy)
    name, port = f"{prefix}-opts", free_port()
    (host_dir / "hello").write_text("from the host\n")
    spec = {
        "name": name,
        "image": TEST_IMAGE,
        "command": ["sh", "-c", "cat /data/hello; sleep 300"],
        "env": {"MODEL": "llama", "WORKERS": 4},
        "labels": {"team": "ml"},
        "ports": {"8000/tcp": ["127.0.0.1", port]},
        "mounts": [
            {"type": "bind", "source": str(host_dir), "target": "/data", "read_only": True},
            {"type": "tmpfs", "target": "/scratch"},
        ],
        "restart_policy": {"name": "on-failure", "maximum_retry_count": 3},
        "shm_size": "64m",
        "ipc_mode": "shareable",
        "ulimits": {"nofile": {"soft": 1024, "hard": 2048}},
        "cluster": "c1",
        "workload": "w1",
        "ray": True,
        "healthcheck": {"test": ["CMD", "true"], "interval_s": 0.2, "retries": 3},
    }
    done = ex.run(f"{prefix}-run", "container.run", spec)
    assert done["state"] == "succeeded", done
    assert done["result"]["status"] == "healthy"
    assert ex.states(f"{prefix}-run") == ["received", "started", "succeeded"]

    attrs = docker_client.api.inspect_container(name)
    labels = attrs["Config"]["Labels"]
    assert labels[protocol.LABEL_MANAGED] == "true"
    assert labels[protocol.LABEL_AGENT_ID] == "fx-agent"
    assert labels[protocol.LABEL_COMMAND_ID] == f"{prefix}-run"
    assert labels[protocol.LABEL_CLUSTER] == "c1" and labels[protocol.LABEL_WORKLOAD] == "w1"
    assert labels[protocol.LABEL_RAY] == "true" and labels["team"] == "ml"
    assert {"MODEL=llama", "WORKERS=4"} <= set(attrs["Config"]["Env"])
    host = attrs["HostConfig"]
    assert host["PortBindings"]["8000/tcp"] == [{"HostIp": "127.0.0.1", "HostPort": str(port)}]
    assert host["RestartPolicy"] == {"Name": "on-failure", "MaximumRetryCount": 3}
    assert host["ShmSize"] == 64 * 1024 * 1024 and host["IpcMode"] == "shareable"
    assert host["Ulimits"] == [{"Name": "nofile", "Soft": 1024, "Hard": 2048}]
    mounts = {m["Destination"]: m for m in attrs["Mounts"]}
    assert mounts["/data"]["Source"] == str(host_dir) and mounts["/data"]["RW"] is False
    ray_dir = tmp_path / "ray" / name
    assert mounts[protocol.RAY_LOG_MOUNT]["Source"] == str(ray_dir) and ray_dir.is_dir()
    assert any(m["Target"] == "/scratch" and m["Type"] == "tmpfs" for m in host["Mounts"])
    wait_for(lambda: b"from the host" in docker_client.containers.get(name).logs(), 10, what="container output")

    stop = ex.run(f"{prefix}-stop", "container.stop", {"name": name, "timeout_s": 1})
    assert stop["state"] == "succeeded" and not docker_client.api.inspect_container(name)["State"]["Running"]
    start = ex.run(f"{prefix}-start", "container.start", {"name": name})
    assert start["state"] == "succeeded" and docker_client.api.inspect_container(name)["State"]["Running"]
    started_at = docker_client.api.inspect_container(name)["State"]["StartedAt"]
    restart = ex.run(f"{prefix}-restart", "container.restart", {"name": name, "timeout_s": 1})
    assert restart["state"] == "succeeded"
    assert docker_client.api.inspect_container(name)["State"]["StartedAt"] != started_at
    remove = ex.run(f"{prefix}-rm", "container.remove", {"name": name})
    assert remove["state"] == "succeeded" and remove["result"]["already_absent"] is False
    assert not docker_client.containers.list(all=True, filters={"name": name})

    # Docker events of the managed container reached the outbox, with exit code on die.
    def lifecycle_events():
        types = [e["type"] for e in ex.events() if e.get("name") == name]
        wanted = {"container.start", "container.die", "container.destroy", "container.health_status"}
        return types if wanted <= set(types) else None

    # Each death is reported once the lines of its cause had 3 s to arrive (death_cause.py),
    # one event at a time: on a loaded 2-core machine the last came after 10 s.
    wait_for(lifecycle_events, 30, what="start/die/destroy/health events")
    dies = [e for e in ex.events("container.die") if e["name"] == name]
    assert all(isinstance(e["exit_code"], int) for e in dies)


def test_same_command_id_twice_runs_once_even_after_restart(executor_factory, prefix, docker_client):
    agent, ex = executor_factory()
    spec = {"name": f"{prefix}-once", "image": TEST_IMAGE, "command": ["sleep", "300"]}
    first = ex.run(f"{prefix}-cmd", "container.run", spec)
    assert first["state"] == "succeeded"
    container_id = first["result"]["container_id"]

    ack = ex.send(f"{prefix}-cmd", "container.run", spec)
    assert ack == {"id": f"{prefix}-cmd", "accepted": True, "duplicate": True}

    agent.stop()
    agent.start()
    ack = ex.send(f"{prefix}-cmd", "container.run", spec)
    assert ack["duplicate"] is True
    containers = docker_client.containers.list(all=True, filters={"name": f"{prefix}-once"})
    assert [c.id for c in containers] == [container_id]
    # exactly one attempt ran; the replayed outcome has the same record id (the backend dedups)
    assert ex.states(f"{prefix}-cmd").count("started") == 1
    terminal_ids = [r["id"] for r in ex.timeline(f"{prefix}-cmd") if r["data"]["state"] == "succeeded"]
    assert set(terminal_ids) == {protocol.timeline_record_id(f"{prefix}-cmd", "succeeded")}


def test_conflict_replace_and_unmanaged_container_is_refused(executor_factory, prefix, docker_client):
    agent, ex = executor_factory()
    name = f"{prefix}-c"
    assert (
        ex.run(f"{prefix}-a", "container.run", {"name": name, "image": TEST_IMAGE, "command": ["sleep", "300"]})[
            "state"
        ]
        == "succeeded"
    )
    conflict = ex.run(f"{prefix}-b", "container.run", {"name": name, "image": TEST_IMAGE, "command": ["sleep", "301"]})
    assert (conflict["state"], conflict["reason"]) == ("failed", "conflict")
    replaced = ex.run(
        f"{prefix}-c",
        "container.run",
        {"name": name, "image": TEST_IMAGE, "command": ["sleep", "302"], "replace": True},
    )
    assert replaced["state"] == "succeeded"
    assert docker_client.containers.get(name).labels[protocol.LABEL_COMMAND_ID] == f"{prefix}-c"

    foreign = docker_client.containers.run(TEST_IMAGE, ["sleep", "300"], name=f"{prefix}-foreign", detach=True)
    for kind in ("container.remove", "container.stop"):
        refused = ex.run(f"{prefix}-{kind}", kind, {"name": foreign.name})
        assert (refused["state"], refused["reason"]) == ("failed", "not_managed"), refused
    replace = ex.run(f"{prefix}-rep", "container.run", {"name": foreign.name, "image": TEST_IMAGE, "replace": True})
    assert replace["reason"] == "not_managed"
    foreign.reload()
    assert foreign.status == "running"
    # explicit adoption: then it is managed
    adopted = ex.run(f"{prefix}-adopt", "container.stop", {"name": foreign.name, "timeout_s": 0, "adopt": True})
    assert adopted["state"] == "succeeded"
    assert ex.run(f"{prefix}-rm2", "container.remove", {"name": foreign.name})["state"] == "succeeded"


def test_gpu_request_without_nvidia_runtime_fails_clearly(executor_factory, prefix, docker_client):
    agent, ex = executor_factory()
    for i, gpus in enumerate(("all", 1, ["0"])):
        done = ex.run(
            f"{prefix}-gpu{i}",
            "container.run",
            {"name": f"{prefix}-gpu{i}", "image": TEST_IMAGE, "command": ["sleep", "30"], "gpus": gpus},
        )
        assert (done["state"], done["reason"]) == ("failed", "gpu_runtime_missing"), done
        assert "NVIDIA" in done["message"] and "Traceback" not in done["message"]
    assert not docker_client.containers.list(all=True, filters={"name": f"{prefix}-gpu"})  # nothing half-made


def test_bad_commands_are_rejected_and_the_worker_keeps_running(executor_factory, prefix):
    agent, ex = executor_factory()
    pid = executor_pid(agent)
    cases = {
        "unknown": ("container.explode", {"name": "x"}, "unknown_kind"),
        "no-image": ("container.run", {"name": "x"}, "invalid_spec"),
        "bad-gpus": ("container.run", {"name": "x", "image": TEST_IMAGE, "gpus": "some"}, "invalid_spec"),
        "not-object": ("container.stop", ["x"], "invalid_spec"),
        "typo": ("container.run", {"name": "x", "image": TEST_IMAGE, "enviroment": {}}, "invalid_spec"),
        "reserved-label": (
            "container.run",
            {"name": "x", "image": TEST_IMAGE, "labels": {protocol.LABEL_MANAGED: "true"}},
            "invalid_spec",
        ),
    }
    for key, (kind, spec, reason) in cases.items():
        done = ex.run(f"{prefix}-{key}", kind, spec)
        assert (done["state"], done["reason"]) == ("rejected", reason), done
        assert done["message"]
    assert ex.send("", "container.run", {})["accepted"] is False
    assert executor_pid(agent) == pid
    ok = ex.run(
        f"{prefix}-ok", "container.run", {"name": f"{prefix}-ok", "image": TEST_IMAGE, "command": ["sleep", "30"]}
    )
    assert ok["state"] == "succeeded"


def test_container_that_exits_at_once_fails_with_its_exit_code(executor_factory, prefix):
    agent, ex = executor_factory()
    done = ex.run(
        f"{prefix}-x",
        "container.run",
        {"name": f"{prefix}-x", "image": TEST_IMAGE, "command": ["sh", "-c", "echo boom; exit 3"]},
    )
    assert (done["state"], done["reason"]) == ("failed", "container_exited"), done
    assert "code 3" in done["message"] and "boom" in done["message"]


def test_unreachable_engine_fails_with_docker_unavailable(executor_factory, prefix, tmp_path):
    agent, ex = executor_factory(docker_host=f"unix://{tmp_path}/no-docker.sock")
    pid = executor_pid(agent)
    done = ex.run(f"{prefix}-x", "container.run", {"name": f"{prefix}-x", "image": TEST_IMAGE}, timeout_s=15)
    assert (done["state"], done["reason"]) == ("failed", "docker_unavailable"), done
    assert executor_pid(agent) == pid and agent.workers()["executor"]["state"] == "RUNNING"


def test_registry_credentials_never_reach_logs_or_records(executor_factory, prefix, registry, tmp_path):
    agent, ex = executor_factory(log_level="debug")
    secret = "pw-" + prefix
    done = ex.run(
        f"{prefix}-pull",
        "image.pull",
        {"image": f"{registry}/faden/busybox:1", "auth": {"username": "bot", "password": secret}},
    )
    assert done["state"] == "succeeded", done  # this registry needs no login; the header is still sent
    rejected = ex.run(f"{prefix}-bad", "image.pull", {"image": "x", "auth": {"username": "bot", "password": 7}})
    assert rejected["reason"] == "invalid_spec"
    agent.stop()
    state_dir = ex.state_dir
    places = [agent.log_path, *state_dir.glob("*")]
    for path in places:
        if path.is_file():
            assert secret.encode() not in path.read_bytes(), path


def test_image_remove(executor_factory, prefix, docker_client):
    agent, ex = executor_factory()
    tag = f"faden-test/{prefix}:rm"
    docker_client.images.get(TEST_IMAGE).tag(tag)
    done = ex.run(f"{prefix}-rm", "image.remove", {"image": tag})
    assert done["state"] == "succeeded" and done["result"]["already_absent"] is False, done
    assert not docker_client.images.list(name=f"faden-test/{prefix}")
    again = ex.run(f"{prefix}-rm2", "image.remove", {"image": tag})
    assert again["state"] == "succeeded" and again["result"]["already_absent"] is True
