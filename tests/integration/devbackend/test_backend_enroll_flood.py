"""The reference backend under unauthenticated enroll heads that never finish their bodies:
each holds a worker a few seconds at most, so the backend answers others again within
seconds, not 503 to everything while the heads hang."""

from __future__ import annotations

import socket
import time
from urllib.parse import urlsplit

import requests

from faden_agent import protocol
from tests.support.backendproc import backend  # noqa: F401

HEADS = 576


def test_never_finished_enroll_bodies_do_not_hold_the_backend(backend):
    address = urlsplit(backend.url)
    held = []
    try:
        for _ in range(HEADS):
            conn = socket.create_connection((address.hostname, address.port), timeout=10)
            conn.sendall(
                f"POST {protocol.ENROLL_PATH} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                "Content-Length: 4096\r\n\r\n{".encode()
            )
            held.append(conn)
        time.sleep(6)  # the heads are still open: their bodies' time is over
        started = time.monotonic()
        answer = requests.get(
            backend.url + protocol.ADMIN_NODES_PATH,
            headers={"Authorization": f"Bearer {backend.admin_token}"},
            timeout=30,
        )
        print(f"{HEADS} unfinished enroll bodies: the next request answered {answer.status_code} "
              f"in {time.monotonic() - started:.2f} s")  # fmt: skip
        assert answer.status_code == 200
    finally:
        for conn in held:
            conn.close()
