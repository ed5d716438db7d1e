"""Requester: one kept REQ connection answers question after question, and a reply that
comes after its question timed out never answers the next one."""

from __future__ import annotations

import threading

from faden_agent.ipc import Requester
from tests.support.repserver import serve


def test_questions_share_one_connection(tmp_path):
    address = f"ipc://{tmp_path}/control.sock"
    peer = serve(address, 3, [])
    asker = Requester(address)
    try:
        channels = []  # held, so a new channel could not reuse an old one's id
        for n in range(3):
            reply = asker.ask("ps", {"n": n}, timeout_s=5.0)
            assert reply is not None and reply.body == {"n": n}
            channels.append(asker._channel)
        assert all(channel is channels[0] for channel in channels)
    finally:
        asker.close()
    peer.join(5.0)


def test_a_late_reply_does_not_answer_the_next_question(tmp_path):
    address = f"ipc://{tmp_path}/control.sock"
    first_may_answer = threading.Event()
    peer = serve(address, 2, [first_may_answer])
    asker = Requester(address)
    try:
        assert asker.ask("ps", {"n": 0}, timeout_s=0.2) is None  # the peer holds this reply
        first_may_answer.set()
        reply = asker.ask("ps", {"n": 1}, timeout_s=5.0)
        assert reply is not None and reply.body == {"n": 1}
    finally:
        asker.close()
    peer.join(5.0)
