"""The peer worker: serves images to peer machines of the cluster (docs/protocol.md
"Images from peers"). Its own process, so a long transfer never delays a heartbeat or a
command; it touches nothing but the Docker engine (docker save) and its listening socket.
"""

from __future__ import annotations

import logging
import threading
from typing import TYPE_CHECKING, Any

from faden_agent.engine.sdk import make_client
from faden_agent.transfers.server import PeerServer
from faden_agent.transfers.tickets import TicketBox
from faden_agent.workers.base import Worker

if TYPE_CHECKING:
    from faden_agent.protocol.status import PeerStatus

log = logging.getLogger(__name__)


class PeerWorker(Worker):
    name = "peer"
    tick_interval_s = 5.0

    def setup(self) -> None:
        self.tickets = TicketBox(self.config.runtime_dir)
        self.server: PeerServer | None = None
        self.error: str | None = None
        self.misconfigured = False  # a setting no retry can fix (set by _listen): not retried
        self.tick_error: str | None = None  # the last tick's refusal (EMFILE), None once one passes
        self._local = threading.local()

    def _docker(self) -> Any:
        client = getattr(self._local, "client", None)
        if client is None:
            client = self._local.client = make_client(self.config.docker_host, timeout_s=self.config.docker_timeout_sec)
        return client

    def _listen(self) -> None:
        config = self.config
        tls = None
        if config.advertise_scheme == "https":
            if not (config.peer_cert_file and config.peer_key_file):
                self.error = "ADVERTISE_SCHEME is https but PEER_CERT_FILE and PEER_KEY_FILE are not both set"
                self.misconfigured = True
                return
            tls = (str(config.peer_cert_file), str(config.peer_key_file))
        try:
            self.server = PeerServer(config.advertise_host, config.peer_port, self.tickets, self._docker, tls)
        except (OSError, ValueError) as exc:  # port taken, address not up yet, unreadable key: retried
            error = f"cannot listen on {config.advertise_host}:{config.peer_port}: {exc}"
            if error != self.error:
                log.warning("%s", error)
            self.error = error
            return
        self.error = None
        log.info(
            "serving images to peers on %s://%s:%d", config.advertise_scheme, config.advertise_host, self.server.port
        )
        self.start_thread("peer-serve", self.server.serve)

    def tick(self) -> None:
        try:
            if self.server is None and not self.misconfigured:
                self._listen()
            self.tickets.expire()
        except OSError as exc:  # EMFILE while a flood holds every descriptor: this round, not the worker
            error = f"tick refused: {exc.strerror or exc}; tried again in {self.tick_interval_s:g} s"
            if error != self.tick_error:
                log.warning("%s", error)
            self.tick_error = error
        else:
            self.tick_error = None

    def status(self) -> PeerStatus:
        server = self.server
        listening: PeerStatus = {
            "listening": server is not None,
            "port": self.config.peer_port,
            "error": self.error or self.tick_error,
        }
        return {**listening, **server.status()} if server is not None else listening

    def teardown(self) -> None:
        if self.server is not None:
            self.server.shutdown()
