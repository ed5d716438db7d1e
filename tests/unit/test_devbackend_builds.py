"""The reference backend's "agent version available" (faden_agent/devbackend/builds.py)."""

from __future__ import annotations

from faden_agent.devbackend.builds import version_key, with_available_version


def node(version: str, machine: str = "x86_64") -> dict:
    return {"node_id": "n1", "version": version, "platform": {"machine": machine}}


def test_version_order():
    ordered = ["0.1.0", "0.1.0.post1", "0.1.1", "0.2.0", "0.10.0"]
    assert sorted(ordered, key=version_key) == ordered
    assert version_key("0.1.0+build2") > version_key("0.1.0")


def test_newer_served_build_is_offered_for_the_nodes_architecture(tmp_path):
    (tmp_path / "faden-agent-linux-x86_64.version").write_text("0.2.0\n")
    assert with_available_version(node("0.1.0"), tmp_path)["available_version"] == "0.2.0"
    assert with_available_version(node("0.2.0"), tmp_path)["available_version"] is None
    assert with_available_version(node("0.3.0"), tmp_path)["available_version"] is None
    assert with_available_version(node("0.1.0", "aarch64"), tmp_path)["available_version"] is None  # none served
    assert with_available_version(node("0.1.0", "amd64"), tmp_path)["available_version"] == "0.2.0"
    assert with_available_version(node("0.1.0"), None)["available_version"] is None  # no downloads directory
