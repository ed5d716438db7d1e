"""The reference backend's "agent version available" (faden_agent/devbackend/builds.py)."""

from __future__ import annotations

from faden_agent.devbackend.builds import build_version, version_key, with_available_version


def node(version: str, machine: str = "x86_64") -> dict:
    return {"node_id": "n1", "version": version, "platform": {"machine": machine}}


def test_version_order():
    ordered = ["0.1.0", "0.1.0.post1", "0.1.1", "0.2.0", "0.10.0"]
    assert sorted(ordered, key=version_key) == ordered
    assert version_key("0.1.0+build2") > version_key("0.1.0")


def served_build(directory, version: str, arch: str = "x86_64"):
    """What packaging/build.sh writes: the launcher header (version in its second line), then bytes."""
    path = directory / f"faden-agent-linux-{arch}"
    path.write_bytes(
        f"#!/bin/sh\n# faden-agent standalone build {version} ({arch})\n# ...\n".encode() + bytes(range(256))
    )
    return path


def test_newer_served_build_is_offered_for_the_nodes_architecture(tmp_path):
    served_build(tmp_path, "0.2.0")
    assert with_available_version(node("0.1.0"), tmp_path)["available_version"] == "0.2.0"
    assert with_available_version(node("0.2.0"), tmp_path)["available_version"] is None
    assert with_available_version(node("0.3.0"), tmp_path)["available_version"] is None
    assert with_available_version(node("0.1.0", "aarch64"), tmp_path)["available_version"] is None  # none served
    assert with_available_version(node("0.1.0", "amd64"), tmp_path)["available_version"] == "0.2.0"
    assert with_available_version(node("0.1.0"), None)["available_version"] is None  # no downloads directory


def test_the_version_comes_from_the_build_itself_not_from_a_file_beside_it(tmp_path):
    (tmp_path / "faden-agent-linux-x86_64.version").write_text("9.9.9\n")  # not shipped by a release: ignored
    assert with_available_version(node("0.1.0"), tmp_path)["available_version"] is None
    served_build(tmp_path, "0.1.0.post1")
    assert with_available_version(node("0.1.0"), tmp_path)["available_version"] == "0.1.0.post1"


def test_anything_but_a_standalone_build_has_no_version(tmp_path):
    not_a_build = tmp_path / "faden-agent-linux-x86_64"
    not_a_build.write_bytes(b"\x7fELF" + bytes(300))
    assert build_version(not_a_build) is None
    not_a_build.write_bytes(b"#!/bin/sh\n# faden-agent standalone build 1.0; rm -rf / (x86_64)\n")
    assert build_version(not_a_build) is None
    assert build_version(tmp_path / "missing") is None
