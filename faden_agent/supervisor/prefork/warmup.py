"""The Docker calls every worker makes first (engine/client.py, http/client.py, http.client) run a
few times before the supervisor forks, against an answerer of its own on a private socket: CPython
rewrites bytecode as it runs, so a path first run after the fork copies its code pages into
every worker. Each logger's level cache is filled too. Nothing leaves the process; a warm-up
that cannot run is skipped.
"""

from __future__ import annotations

import contextlib
import logging
import os
import selectors
import socket
import sys
import tempfile
import threading
import time
from typing import cast

from faden_agent.common.errorline import error_line

log = logging.getLogger(__name__)

# 3.12+ specializes an instruction at its second run (a client's set-up runs once a round);
# 3.11 quickens a code object after 8 calls.
ROUNDS = 2 if sys.version_info >= (3, 12) else 9
TIMEOUT_S = 2.0  # each call, and each send of an answer
LIFE_S = 10.0  # the answerer's longest life, however slow the machine or hung its client
MAX_HEAD_BYTES = 16 << 10  # a request head of the warm-up's own client is under 1 KiB
VERSION = b'{"Version": "warm-up", "ApiVersion": "1.44", "MinAPIVersion": "1.24"}'
ANSWERS = (  # the path's end, the content type, the body
    (b"/_ping", b"text/plain", b"OK"),
    (b"/version", b"application/json", VERSION),
    (b"/containers/json", b"application/json", b"[]"),
)


def answer(head: bytes) -> bytes:
    """The engine's answer to one request head: what the warm-up asks, or a 404."""
    parts = head.split(b" ", 2)
    path = parts[1].split(b"?", 1)[0] if len(parts) == 3 else b""
    status, kind, body = next(
        ((b"200 OK", kind, body) for suffix, kind, body in ANSWERS if path.endswith(suffix)),
        (b"404 Not Found", b"application/json", b"{}"),
    )
    return b"HTTP/1.1 %s\r\nContent-Type: %s\r\nContent-Length: %d\r\n\r\n%s" % (status, kind, len(body), body)


class Answerer:
    """A Docker engine's few answers on a listening Unix socket, from one thread that ends,
    with every connection, when the `with` block does."""

    def __init__(self, listener: socket.socket):
        self.listener = listener
        self.stopping = threading.Event()
        self.thread = threading.Thread(target=self._serve, name="faden-warm-up", daemon=True)

    def _serve(self) -> None:
        deadline = time.monotonic() + LIFE_S
        heads: dict[socket.socket, bytes] = {}
        with selectors.DefaultSelector() as selector:
            selector.register(self.listener, selectors.EVENT_READ)
            try:
                while not self.stopping.is_set() and time.monotonic() < deadline:
                    for key, _ in selector.select(timeout=0.01):
                        if key.fileobj is self.listener:
                            try:
                                conn, _ = self.listener.accept()
                            except OSError:  # out of descriptors: the client's calls fail as well
                                continue
                            conn.settimeout(TIMEOUT_S)  # a client that reads nothing cannot hold the thread
                            selector.register(conn, selectors.EVENT_READ)
                            heads[conn] = b""
                        elif not self._read(conn := cast(socket.socket, key.fileobj), heads):
                            selector.unregister(conn)
                            conn.close()
                            del heads[conn]
            finally:
                for conn in heads:
                    conn.close()

    @staticmethod
    def _read(conn: socket.socket, heads: dict[socket.socket, bytes]) -> bool:
        """Answers the complete request heads read so far; False when the connection ends (or
        failed, or sent a head over MAX_HEAD_BYTES)."""
        try:
            data = conn.recv(MAX_HEAD_BYTES)
            heads[conn] += data
            while b"\r\n\r\n" in heads[conn]:
                head, _, heads[conn] = heads[conn].partition(b"\r\n\r\n")
                conn.sendall(answer(head))
        except OSError:  # reset, or a send past TIMEOUT_S
            return False
        return bool(data) and len(heads[conn]) < MAX_HEAD_BYTES

    def __enter__(self) -> Answerer:
        self.thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self.stopping.set()
        self.thread.join(TIMEOUT_S + 1.0)  # past a send it may be in


def rounds_of_docker_calls(socket_path: str, rounds: int = ROUNDS) -> None:
    """The workers' first calls (the API version's negotiation, a ping, a list) through the
    agent's own client, `rounds` clients in turn."""
    from faden_agent.engine import containers
    from faden_agent.engine.client import EngineClient

    for _ in range(rounds):
        client = EngineClient(f"unix://{socket_path}", timeout_s=TIMEOUT_S)
        try:
            client.ping()
            containers.listed(client, all=True, filters={"label": "warm-up"})
        finally:
            client.close()


def fill_level_caches() -> int:
    """Asks every logger whether each standard level is enabled, filling its cache (a dict a
    worker would otherwise write to at its first line of each level); how many loggers."""
    loggers = [logging.getLogger()]
    loggers += [lg for lg in logging.Logger.manager.loggerDict.values() if isinstance(lg, logging.Logger)]
    for logger in loggers:
        for level in (logging.DEBUG, logging.INFO, logging.WARNING, logging.ERROR, logging.CRITICAL):
            logger.isEnabledFor(level)
    return len(loggers)


def warm_up() -> bool:
    """Runs the calls against a private answerer; False (logged at debug) where it could not."""
    fill_level_caches()
    try:
        folder = tempfile.mkdtemp(prefix="faden-warm-up-")  # 0700: no other user reaches the socket
    except OSError as exc:
        log.debug("no warm-up before forking: %s", error_line(exc))
        return False
    path = os.path.join(folder, "engine.sock")
    try:
        with socket.socket(socket.AF_UNIX) as listener:
            listener.bind(path)
            listener.listen(8)
            with Answerer(listener):
                rounds_of_docker_calls(path)
        return True
    except Exception as exc:  # noqa: BLE001 - an optimization, never a reason for the start to fail
        log.debug("the warm-up before forking stopped: %s", error_line(exc))
        return False
    finally:
        with contextlib.suppress(OSError):
            os.unlink(path)
        with contextlib.suppress(OSError):
            os.rmdir(folder)
