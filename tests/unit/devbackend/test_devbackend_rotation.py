"""The reference backend's credential rotation a clone cannot win (devbackend/rotation.py):
each stream that asks gets a fresh pending credential (the one before withdrawn, whether its
stream ended or not); a withdrawn credential used, or a replaced one on a stream, contests the
node (every credential refused); a pending rotation survives a second ask and a restart."""

from __future__ import annotations

import pytest

from faden_agent.devbackend.rotation import Contested
from faden_agent.devbackend.store import Store


@pytest.fixture
def store(tmp_path):
    s = Store(tmp_path)
    yield s
    s.close()


def enrolled(store: Store) -> tuple[str, str]:
    return store.enroll(store.mint_token(), {"agent_id": "a"})


def test_one_machine_rotates_and_a_lost_delivery_is_withdrawn_not_resent(store):
    node_id, old = enrolled(store)
    assert store.credential_for_stream(node_id) is None  # nothing pending
    assert store.rotate_credential(node_id)
    first = store.credential_for_stream(node_id)
    # that stream's agent died before it wrote the credential (its connection may look open:
    # a power cut sends no FIN); its next stream asks again
    second = store.credential_for_stream(node_id)
    assert first and second and first != second  # withdrawn: never handed to two streams
    assert store.node_for_credential(second, stream=True) == (node_id, False)  # confirmed
    assert store.node_for_credential(old) is None  # a straggler of the old one: refused, no contest
    assert store.node_for_credential(second) == (node_id, False)
    assert not store.node(node_id)["shared_identity"]


def test_two_machines_asking_end_with_one_using_a_withdrawn_credential(store):
    node_id, old = enrolled(store)
    store.rotate_credential(node_id)
    first = store.credential_for_stream(node_id)  # the machine's stream
    second = store.credential_for_stream(node_id)  # the clone's, while the first is open
    assert first and second and first != second
    assert store.node_for_credential(second) == (node_id, False)  # the clone confirms at once
    for credential in (first, second):  # the machine uses what it was given: withdrawn
        with pytest.raises(Contested, match="enroll this machine again"):
            store.node_for_credential(credential)
    assert store.node_for_credential(old) is None  # replaced: refused
    view = store.node(node_id)
    assert view["shared_identity"] and view["identity_contested_at"] and not view["credential_rotating"]
    assert not store.rotate_credential(node_id)


def test_a_pending_rotation_is_kept_when_asked_again(store):
    node_id, old = enrolled(store)
    assert store.rotate_credential(node_id)
    given = store.credential_for_stream(node_id)
    assert store.rotate_credential(node_id)  # asked again: the machine may hold `given` unconfirmed
    assert store.node_for_credential(given, stream=True) == (node_id, False)
    assert store.node_for_credential(old) is None


def test_a_rotation_pending_across_a_backend_restart_is_delivered_afresh(store, tmp_path):
    node_id, old = enrolled(store)
    assert store.rotate_credential(node_id)
    store.close()
    restarted = Store(tmp_path)  # the pending credential's plain text was in memory only
    try:
        fresh = restarted.credential_for_stream(node_id)
        assert fresh is not None
        assert restarted.node_for_credential(fresh, stream=True) == (node_id, False)
        assert restarted.node_for_credential(old) is None
        assert not restarted.node(node_id)["shared_identity"]
    finally:
        restarted.close()


@pytest.mark.parametrize("how", ["withdrawn", "replaced"])
def test_a_clone_that_confirmed_first_is_caught_by_the_machine_s_next_stream(store, how):
    node_id, old = enrolled(store)
    store.rotate_credential(node_id)
    taken = store.credential_for_stream(node_id)
    assert taken is not None
    if how == "withdrawn":  # the machine asked after the clone: a fresh one
        fresh = store.credential_for_stream(node_id)
        assert store.node_for_credential(fresh) == (node_id, False)
        with pytest.raises(Contested):
            store.node_for_credential(taken)  # the clone uses the withdrawn one
    else:  # the clone confirmed; the machine opens its stream with the replaced one
        assert store.node_for_credential(taken) == (node_id, False)
        with pytest.raises(Contested):
            store.node_for_credential(old, stream=True)
    with pytest.raises(Contested):
        store.node_for_credential(taken)
