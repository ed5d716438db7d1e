"""One description of a managed container (protocol/container.py): the inventory's rows and the
executor's container.adopted event use the same keys; only our labels and, of the
environment, only NVIDIA_VISIBLE_DEVICES leave the machine."""

from __future__ import annotations

from types import SimpleNamespace

from faden_agent.protocol.container import describe
from faden_agent.workers.executor.adoption import container_summary

INSPECT = {
    "Id": "c0ffee" * 10,
    "Name": "/ray-head",
    "Image": "sha256:abc",
    "RestartCount": 2,
    "State": {"Status": "running", "ExitCode": 0, "OOMKilled": False, "StartedAt": "2026-12-01T00:00:00Z"},
    "Config": {
        "Image": "rayproject/ray:2.9",
        "Labels": {"io.fadenstack.managed": "true", "io.fadenstack.ray": "true", "com.other": "x"},
        "Env": ["HF_TOKEN=hf_secretsecret", "NVIDIA_VISIBLE_DEVICES=0,1"],
    },
    "HostConfig": {"Runtime": "nvidia"},
}


def test_describe_keeps_one_vocabulary_and_no_secret():
    facts = describe(INSPECT)
    assert facts["id"] == INSPECT["Id"] and facts["name"] == "ray-head" and facts["state"] == "running"
    assert facts["labels"] == {"io.fadenstack.managed": "true", "io.fadenstack.ray": "true"}
    assert facts["gpus"] == {"source": "env", "count": 2, "device_ids": ["0", "1"]}
    assert "hf_secret" not in repr(facts)


def test_the_adopted_event_describes_it_the_same_way_and_keeps_the_old_names():
    container = SimpleNamespace(attrs=INSPECT, labels=INSPECT["Config"]["Labels"])
    summary = container_summary(container)
    assert {k: summary[k] for k in describe(INSPECT)} == describe(INSPECT)
    assert summary["container_id"] == summary["id"] and summary["status"] == summary["state"]  # for one release
    assert summary["managed_by"] == "label" and summary["ray"] is True
