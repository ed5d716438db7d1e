"""A worker's last message before os._exit (its "thread_died") must reach the supervisor:
ZeroMQ sends from a thread of its own, and os._exit drops what that thread still holds
(with a plain send, 8 of 50 such messages were lost)."""

from __future__ import annotations

import os

import pytest
import zmq

from faden_agent.ipc import Channel, send_last_word


def exit_after_last_word(address: str) -> None:
    pid = os.fork()
    if pid == 0:
        send_last_word(address, "thread_died", {"n": 1})
        os._exit(0)
    os.waitpid(pid, 0)


# The receiver's ZeroMQ thread runs while we fork (3.12 warns); the child touches only a
# context of its own, as a worker does.
@pytest.mark.filterwarnings("ignore:This process .* is multi-threaded:DeprecationWarning")
def test_a_last_word_arrives_although_the_process_exits_at_once(tmp_path):
    address = f"ipc://{tmp_path}/liveness"
    receiver = Channel.bind(zmq.PULL, address)
    try:
        for _ in range(50):
            exit_after_last_word(address)
            message = receiver.recv(timeout_s=5)
            assert message is not None and message.type == "thread_died" and message.body == {"n": 1}
    finally:
        receiver.close()
