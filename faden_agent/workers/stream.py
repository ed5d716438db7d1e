"""Stream worker (skeleton): owns the backend connection; issue 3 brings enrollment and the stream."""

from __future__ import annotations

import zmq

from faden_agent.ipc import Channel, Message
from faden_agent.workers.base import Worker


class StreamWorker(Worker):
    name = "stream"

    def setup(self) -> None:
        self.uplink = Channel.bind(zmq.PULL, self.endpoints.uplink)

    def channels(self) -> list[Channel]:
        return [self.uplink]

    def handle(self, channel: Channel, message: Message) -> None:
        pass  # pokes: the outbox is read when the backend connection exists

    def teardown(self) -> None:
        self.uplink.close()
