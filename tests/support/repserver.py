"""A REP peer for the tests of the supervisor socket's clients: it echoes or answers as scripted,
holding a reply until the test releases it."""

from __future__ import annotations

import threading
from typing import Any

import zmq

from faden_agent.ipc import Channel, decode


def serve(
    address: str, replies: int, delays: list[threading.Event], answers: list[Any] | None = None
) -> threading.Thread:
    """A REP peer that echoes each question's body, holding the n-th reply until delays[n] is set;
    with `answers`, the n-th reply is answers[n] instead: (type, body), or raw bytes (a garbled frame)."""
    rep = Channel.bind(zmq.REP, address)

    def loop() -> None:
        try:
            for n in range(replies):
                assert rep.socket.poll(5000)
                question = rep.socket.recv()
                if n < len(delays):
                    delays[n].wait(5.0)
                answer = answers[n] if answers else ("answer", decode(question).body)
                if isinstance(answer, bytes):
                    rep.socket.send(answer)
                else:
                    rep.send(*answer)
        finally:
            rep.close()

    thread = threading.Thread(target=loop, daemon=True)
    thread.start()
    return thread
