"""The state file: atomic, 0600, never overwritten, one clear error per way it can be wrong."""

from __future__ import annotations

import stat

import orjson
import pytest

from faden_agent.node.membership import (
    MembershipError,
    check_backend,
    load_membership,
    new_membership,
    write_membership,
)

URL = "https://backend.example"


def test_write_then_load_roundtrip_0600_and_dirs_created(tmp_path):
    path = tmp_path / "a" / "b" / "state.json"
    state = new_membership(URL, "node-1", "secret-credential", "gpu-1")
    write_membership(path, state)
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert stat.S_IMODE(path.parent.stat().st_mode) == 0o700
    assert load_membership(path) == state
    assert list(path.parent.iterdir()) == [path]  # no temp file left behind


def test_missing_file_means_not_enrolled(tmp_path):
    assert load_membership(tmp_path / "nope.json") is None


def test_never_overwrites_an_existing_file(tmp_path):
    path = tmp_path / "state.json"
    write_membership(path, new_membership(URL, "node-1", "c1", "a"))
    before = path.read_bytes()
    with pytest.raises(MembershipError, match="already exists"):
        write_membership(path, new_membership(URL, "node-2", "c2", "a"))
    assert path.read_bytes() == before
    assert [p.name for p in tmp_path.iterdir()] == ["state.json"]


@pytest.mark.parametrize(
    "content, match",
    [
        (b"{not json", "corrupt"),
        (b"[]", "not a version-1"),
        (orjson.dumps({"version": 7}), "not a version-1"),
        (orjson.dumps({"version": 1, "backend_url": URL, "node_id": "n", "agent_id": "a"}), "credential"),
    ],
)
def test_corrupt_files_give_one_clear_error_and_stay(tmp_path, content, match):
    path = tmp_path / "state.json"
    path.write_bytes(content)
    with pytest.raises(MembershipError, match=match) as info:
        load_membership(path)
    assert str(path) in str(info.value)
    assert "\n" not in str(info.value)
    assert path.read_bytes() == content


def test_unreadable_file(tmp_path):
    path = tmp_path / "state.json"
    path.mkdir()  # reading a directory fails even as root
    with pytest.raises(MembershipError, match="unreadable"):
        load_membership(path)


def test_state_for_another_backend_is_refused(tmp_path):
    state = new_membership(URL, "node-1", "secret-credential", "gpu-1")
    check_backend(state, URL + "/", tmp_path)
    with pytest.raises(MembershipError, match="belongs to backend https://backend.example") as info:
        check_backend(state, "https://other.example", tmp_path / "state.json")
    assert "secret-credential" not in str(info.value)


def test_repr_hides_the_credential():
    state = new_membership(URL, "node-1", "secret-credential", "gpu-1")
    assert "secret-credential" not in repr(state) and "secret-credential" not in str(state)
