"""An honest receiver of a real agent's peer port: the backend's image.serve ticket, a whole
fetch (timed, the archive checked), and a slow one that holds a transfer open part-way (a
small receive buffer, read a little at a time) for whoever wants to cut it."""

from __future__ import annotations

import socket
import tarfile
import time

import orjson
import requests

from faden_agent import protocol
from faden_agent.transfers import wire
from faden_agent.transfers.tickets import ticket_hash

MiB = 1 << 20


def serve_ticket(backend, node_id: str, image_id: str, ticket: str) -> None:
    """The backend has the holder serve `image_id` to 127.0.0.1 once, with `ticket`."""
    spec = {"image_id": image_id, "receiver": "127.0.0.1", "ttl_s": 120, "ticket_sha256": ticket_hash(ticket)}
    done = backend.wait_command(backend.send_command(node_id, "image.serve", spec), timeout_s=30)
    assert done["state"] == protocol.SUCCEEDED, done


def post_fetch(base: str, image_id: str, ticket: str, timeout: float, **kwargs) -> requests.Response:
    """The fetch request, its answer streamed (a context manager)."""
    return requests.post(
        base + protocol.PEER_FETCH_PATH,
        json={"image_id": image_id, "held_chains": []},
        headers={"Authorization": f"Bearer {ticket}"},
        stream=True,
        timeout=timeout,
        **kwargs,
    )


def fetch(base: str, image_id: str, ticket: str, **kwargs) -> tuple[float, float, int]:
    """An honest receiver: (seconds to the answer's head, seconds to its end, archive bytes)."""
    started = time.monotonic()
    with post_fetch(base, image_id, ticket, 10, **kwargs) as answer:
        head_s = time.monotonic() - started
        assert answer.status_code == 200, answer.text
        size = sum(len(chunk) for chunk in answer.iter_content(MiB))
    return head_s, time.monotonic() - started, size


def fetch_archive_members(base: str, image_id: str, ticket: str) -> list[str]:
    """A whole fetch read as the tar archive it must be: its member names (an error when the
    answer is refused, cut, or not a whole archive)."""
    with post_fetch(base, image_id, ticket, 30) as answer:
        if answer.status_code != 200:
            raise AssertionError(f"HTTP {answer.status_code}: {answer.text[:300]}")
        with tarfile.open(fileobj=answer.raw, mode="r|") as archive:
            return [member.name for member in archive]


class SlowReceiver:
    """A fetch over a socket with a small receive buffer, read only when asked: the holder's
    transfer stays under way (blocked on a full socket) between reads."""

    def __init__(self, port: int, image_id: str, ticket: str, buffer_bytes: int = 4096):
        self.sock = socket.socket()
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, buffer_bytes)  # before connect: the window
        self.sock.settimeout(10)
        self.sock.connect(("127.0.0.1", port))
        body = orjson.dumps({"image_id": image_id, "held_chains": []})
        self.sock.sendall(
            (
                f"POST {protocol.PEER_FETCH_PATH} HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {ticket}\r\n"
                f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\nConnection: close\r\n\r\n"
            ).encode()
            + body
        )
        self.rfile = self.sock.makefile("rb")
        self.status, self.headers = wire.read_head(self.rfile)
        self.body = wire.body(self.rfile, self.headers, "holder")
        self.received = 0

    def read(self, at_least: int) -> None:
        """Take in `at_least` more bytes of the archive."""
        goal = self.received + at_least
        while self.received < goal:
            self.received += len(next(self.body))

    def rest(self) -> str:
        """Read to the end: 'complete' (the archive's last chunk came) or how it broke."""
        try:
            for piece in self.body:
                self.received += len(piece)
        except (wire.PeerFailure, OSError) as exc:
            return f"cut: {type(exc).__name__}: {exc}"
        return "complete"

    def close(self) -> None:
        self.rfile.close()
        self.sock.close()
