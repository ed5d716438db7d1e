"""Relay of one image stream through the reference backend, for peers that cannot reach each
other: both sides connect outbound.
"""

from __future__ import annotations

import hashlib
import hmac
import queue
import secrets
import threading
import time
import uuid

RELAY_BUFFER = 32  # chunks in flight through the backend
WAIT_S = 60.0  # how long one side waits for the other to show up


def digest(secret: str) -> str:
    return hashlib.sha256(secret.encode()).hexdigest()


class Relay:
    def __init__(self, image_id: str, ttl_s: float):
        self.id = uuid.uuid4().hex
        self.image_id = image_id
        self.expires_at = time.time() + ttl_s
        self.ticket = secrets.token_urlsafe(32)  # handed out once, then forgotten
        self.token = secrets.token_urlsafe(32)
        self._ticket_hash, self._token_hash = digest(self.ticket), digest(self.token)
        self.ticket_used = False
        self.request: bytes | None = None
        self.request_ready = threading.Event()
        self.headers: dict[str, str] | None = None
        self.stream_started = threading.Event()
        self.chunks: queue.Queue[bytes | None | Exception] = queue.Queue(maxsize=RELAY_BUFFER)
        self.bytes = 0
        self._lock = threading.Lock()

    def forget_secrets(self) -> None:
        self.ticket = self.token = ""

    def take_ticket(self, presented: str) -> bool:
        """The receiver's ticket: once, before expiry."""
        with self._lock:
            ok = (
                not self.ticket_used
                and time.time() < self.expires_at
                and hmac.compare_digest(digest(presented), self._ticket_hash)
            )
            self.ticket_used = self.ticket_used or ok
            return ok

    def holder_token_ok(self, presented: str) -> bool:
        return time.time() < self.expires_at and hmac.compare_digest(digest(presented), self._token_hash)
