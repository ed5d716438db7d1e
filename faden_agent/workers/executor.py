"""Executor worker (skeleton): answers every command with a rejection until issue 4."""

from __future__ import annotations

import zmq

from faden_agent.ipc import Channel, Message
from faden_agent.workers.base import Worker


class ExecutorWorker(Worker):
    name = "executor"

    def setup(self) -> None:
        self.commands = Channel.bind(zmq.REP, self.endpoints.executor)

    def channels(self) -> list[Channel]:
        return [self.commands]

    def handle(self, channel: Channel, message: Message) -> None:
        channel.send("ack", {"accepted": False, "reason": "not_implemented", "message": "the executor runs no commands yet"})

    def teardown(self) -> None:
        self.commands.close()
