"""One bounded GET of a container's metrics: HTTP/1.0 over a plain socket (no chunking, no
compression), the whole exchange within a deadline and a byte cap, the body parsed as it
arrives (promtext.py), so a hung, huge, drip-fed or garbage endpoint fails with a reason
and never holds more than a line in memory."""

from __future__ import annotations

import socket
import time

from faden_agent.workers.inventory.workloads.promtext import MAX_LINE_BYTES, add_samples

MAX_BYTES = 8 << 20  # a vLLM with many models and histograms exposes a few hundred KiB
MAX_HEAD_BYTES = 16 << 10
READ_BYTES = 64 << 10


class ScrapeFailed(Exception):
    """reason: a bounded word (unreachable, timeout, too_large, http_status, not_metrics)."""

    def __init__(self, reason: str, message: str):
        super().__init__(message)
        self.reason = reason


def scrape(host: str, port: int, path: str, deadline_s: float, max_bytes: int = MAX_BYTES) -> dict[str, float]:
    """The summed WANTED samples of http://host:port/path, or ScrapeFailed."""
    give_up = time.monotonic() + deadline_s

    def left() -> float:
        remaining = give_up - time.monotonic()
        if remaining <= 0:
            raise ScrapeFailed("timeout", f"no whole answer within {deadline_s:g} s")
        return remaining

    try:
        sock = socket.create_connection((host, port), timeout=left())
    except OSError as exc:
        raise ScrapeFailed("unreachable", f"cannot connect to {host}:{port}: {exc.strerror or exc}") from None
    with sock:
        try:
            sock.sendall(f"GET {path} HTTP/1.0\r\nHost: {host}:{port}\r\nAccept: text/plain\r\n\r\n".encode())
            return _read_answer(sock, left, max_bytes)
        except TimeoutError:
            raise ScrapeFailed("timeout", f"no whole answer within {deadline_s:g} s") from None
        except OSError as exc:
            raise ScrapeFailed("unreachable", f"the answer broke: {exc.strerror or exc}") from None


def _read_answer(sock: socket.socket, left, max_bytes: int) -> dict[str, float]:
    totals: dict[str, float] = {}
    pending = b""
    head_done = False
    received = 0
    skipping = False  # inside a line over MAX_LINE_BYTES: dropped up to its newline
    while True:
        sock.settimeout(left())
        chunk = sock.recv(READ_BYTES)
        if not chunk:
            break
        received += len(chunk)
        if received > max_bytes:
            raise ScrapeFailed("too_large", f"an answer over {max_bytes} bytes")
        pending += chunk
        if not head_done:
            end = pending.find(b"\r\n\r\n")
            if end < 0:
                if len(pending) > MAX_HEAD_BYTES:
                    raise ScrapeFailed("not_metrics", f"no HTTP head within {MAX_HEAD_BYTES} bytes")
                continue
            _check_status(pending[:end])
            head_done, pending = True, pending[end + 4 :]
        lines = pending.split(b"\n")
        pending = lines.pop()
        if skipping and lines:
            lines, skipping = lines[1:], False
        add_samples(totals, lines)
        if len(pending) > MAX_LINE_BYTES:
            pending, skipping = b"", True
    if not head_done:
        raise ScrapeFailed("not_metrics", "the answer ended before its HTTP head did")
    if not skipping:
        add_samples(totals, [pending])
    if not totals:
        raise ScrapeFailed("not_metrics", "no vLLM or Ray Serve metric in the answer")
    return totals


def _check_status(head: bytes) -> None:
    status_line = head.split(b"\r\n", 1)[0].decode("latin-1")[:200]
    parts = status_line.split()
    if len(parts) < 2 or not parts[0].startswith("HTTP/"):
        raise ScrapeFailed("not_metrics", f"not an HTTP answer: {status_line!r}")
    if parts[1] != "200":
        raise ScrapeFailed("http_status", f"answered {status_line!r}")
