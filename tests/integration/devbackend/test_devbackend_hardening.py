"""The reference backend against hostile requests, a real dev-backend process on
loopback, raw sockets for what requests would never send: a Content-Length of -1 is
refused, not read to EOF (everything the client sent, in memory), a gzip bomb is not
inflated past its bound, and `--admin-token ""` does not open the admin API to anyone."""

from __future__ import annotations

import gzip
import os
import socket
import subprocess
import sys
import zlib

import pytest

from faden_agent import protocol
from tests.support.agentproc import peak_rss_mib
from tests.support.backendproc import backend  # noqa: F401

MIB = 1024 * 1024


def raw_post(url: str, path: str, headers: dict[str, str], body_chunks, timeout_s: float = 30.0) -> bytes:
    """Send a request byte for byte; returns the status line and headers of the answer."""
    host, port = url.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=timeout_s) as sock:
        head = f"POST {path} HTTP/1.1\r\nHost: {host}\r\n" + "".join(f"{k}: {v}\r\n" for k, v in headers.items())
        sock.sendall(head.encode() + b"\r\n")
        try:
            for chunk in body_chunks:
                sock.sendall(chunk)
        except OSError:
            pass  # the server answered and closed: what a refusal looks like
        answer = b""
        while b"\r\n\r\n" not in answer:
            data = sock.recv(65536)
            if not data:
                break
            answer += data
    return answer


ENROLL = "/api/agent/v1/enroll"


def test_a_negative_content_length_is_refused_unread(backend):
    before = peak_rss_mib(backend.proc.pid)
    answer = raw_post(
        backend.url,
        ENROLL,
        {"Content-Length": "-1", "Content-Type": "application/json"},
        (b"x" * MIB for _ in range(64)),
    )
    assert answer.startswith(b"HTTP/1.1 400"), answer[:200]
    assert peak_rss_mib(backend.proc.pid) - before < 32, "the body was buffered"


@pytest.mark.parametrize("length", [str(protocol.MAX_REQUEST_BODY_BYTES + 1), "99999999999999999999999", "12abc"])
def test_an_over_size_or_garbage_content_length_is_refused_unread(backend, length):
    answer = raw_post(backend.url, ENROLL, {"Content-Length": length}, [b"{}"])
    assert answer.split(b" ")[1] in (b"400", b"413"), answer[:200]


def test_a_gzip_bomb_is_refused_after_the_limit(backend):
    deflater = zlib.compressobj(9, wbits=31)
    bomb = b"".join(deflater.compress(b"\0" * (16 * MIB)) for _ in range(32)) + deflater.flush()  # 512 MiB inflated
    assert len(bomb) < 2 * MIB
    before = peak_rss_mib(backend.proc.pid)
    answer = raw_post(
        backend.url,
        ENROLL,
        {"Content-Length": str(len(bomb)), "Content-Encoding": "gzip", "Content-Type": "application/json"},
        [bomb],
    )
    assert answer.startswith(b"HTTP/1.1 413"), answer[:200]
    growth = peak_rss_mib(backend.proc.pid) - before
    assert growth < 3 * protocol.MAX_REQUEST_BODY_BYTES / MIB, f"peak RSS grew {growth:.0f} MiB"


def test_a_gzip_body_within_the_limit_is_still_read(backend):
    token = backend.mint_token()
    body = gzip.compress(b'{"token": "%s", "agent_id": "gz-agent", "hostname": "h"}' % token.encode())
    answer = raw_post(
        backend.url,
        ENROLL,
        {"Content-Length": str(len(body)), "Content-Encoding": "gzip", "Content-Type": "application/json"},
        [body],
    )
    assert answer.startswith(b"HTTP/1.1 200"), answer[:300]


@pytest.mark.parametrize("token", ["", "   "])
def test_an_empty_admin_token_refuses_to_start(tmp_path, token):
    argv = [sys.executable, "-m", "faden_agent", "dev-backend", "--port", "0", "--data", str(tmp_path / "d")]
    env = {**os.environ, "FADEN_ADMIN_TOKEN": token}
    done = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode != 0
    assert "admin" in (done.stdout + done.stderr).lower() and "listening" not in done.stdout


def test_the_backend_object_refuses_an_empty_admin_token(tmp_path):
    from faden_agent.devbackend.app import Backend

    with pytest.raises(ValueError, match="admin token"):
        Backend(tmp_path, "")
