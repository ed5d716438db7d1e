"""The reference backend's credential rotation a clone cannot win (devbackend/rotation.py):
one stream gets the pending credential; a second machine asking, a withdrawn credential, or a
replaced one on a stream contests the node (every credential refused). Real socket pairs
stand for the streams' connections."""

from __future__ import annotations

import socket
import ssl
import threading

import pytest

from faden_agent.devbackend.rotation import Contested, still_open
from faden_agent.devbackend.store import Store
from tests.support.agentproc import wait_for
from tests.support.selfsigned import self_signed


@pytest.fixture
def store(tmp_path):
    s = Store(tmp_path)
    yield s
    s.close()


@pytest.fixture
def streams():
    pairs = [socket.socketpair() for _ in range(3)]
    yield pairs
    for ours, theirs in pairs:
        ours.close()
        theirs.close()


def enrolled(store: Store) -> tuple[str, str]:
    return store.enroll(store.mint_token(), {"agent_id": "a"})


def test_one_machine_rotates_and_a_lost_delivery_is_withdrawn_not_resent(store, streams):
    node_id, old = enrolled(store)
    assert store.credential_for_stream(node_id, streams[0][0]) is None  # nothing pending
    assert store.rotate_credential(node_id)
    first = store.credential_for_stream(node_id, streams[0][0])
    streams[0][1].close()  # that stream's agent died before it wrote the credential
    second = store.credential_for_stream(node_id, streams[1][0])
    assert first and second and first != second  # withdrawn: never handed to two streams
    assert store.node_for_credential(second, stream=True) == (node_id, False)  # confirmed
    assert store.node_for_credential(old) is None  # a straggler of the old one: refused, no contest
    assert store.node_for_credential(second) == (node_id, False)
    assert not store.node(node_id)["shared_identity"]


def test_a_second_live_stream_asking_contests_the_node(store, streams):
    node_id, old = enrolled(store)
    store.rotate_credential(node_id)
    new = store.credential_for_stream(node_id, streams[0][0])
    with pytest.raises(Contested):
        store.credential_for_stream(node_id, streams[1][0])  # the first is still open: two machines
    for credential in (old, new):
        with pytest.raises(Contested, match="enroll this machine again"):
            store.node_for_credential(credential)
    view = store.node(node_id)
    assert view["shared_identity"] and view["identity_contested_at"] and not view["credential_rotating"]
    assert not store.rotate_credential(node_id)


@pytest.mark.parametrize("how", ["withdrawn", "replaced"])
def test_a_clone_that_confirmed_first_is_caught_by_the_machine_s_next_stream(store, streams, how):
    node_id, old = enrolled(store)
    store.rotate_credential(node_id)
    taken = store.credential_for_stream(node_id, streams[0][0])
    streams[0][1].close()
    assert taken is not None
    if how == "withdrawn":  # the machine asked after the clone's stream ended: a fresh one
        fresh = store.credential_for_stream(node_id, streams[1][0])
        assert store.node_for_credential(fresh) == (node_id, False)
        with pytest.raises(Contested):
            store.node_for_credential(taken)  # the clone uses the withdrawn one
    else:  # the clone confirmed; the machine opens its stream with the replaced one
        assert store.node_for_credential(taken) == (node_id, False)
        with pytest.raises(Contested):
            store.node_for_credential(old, stream=True)
    with pytest.raises(Contested):
        store.node_for_credential(taken)


def test_a_tls_stream_is_judged_open_or_ended_too(tmp_path):
    """The backend's stream sockets are TLS sockets when it serves https: they refuse the
    MSG_PEEK a plain socket takes; the liveness check must judge them all the same."""
    cert, key = self_signed(tmp_path)
    server_context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    server_context.load_cert_chain(cert, key)
    client_context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    client_context.check_hostname, client_context.verify_mode = False, ssl.CERT_NONE
    listener = socket.create_server(("127.0.0.1", 0))
    clients: list[ssl.SSLSocket] = []
    handshake = threading.Thread(
        target=lambda: clients.append(client_context.wrap_socket(socket.create_connection(listener.getsockname())))
    )
    handshake.start()
    served = server_context.wrap_socket(listener.accept()[0], server_side=True)
    handshake.join()
    try:
        assert still_open(served)
        clients[0].close()  # the agent's process ended: its kernel sends FIN
        wait_for(lambda: not still_open(served), 5, interval_s=0.01, what="the ended TLS stream seen as ended")
    finally:
        served.close()
        listener.close()
    assert not still_open(served)  # closed here too
