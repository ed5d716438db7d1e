"""Pull slots that a hostile registry cannot hold: the size check before a pull
runs before a slot is taken, under one deadline for all its requests, given up when the
command is cancelled; a token realm on another host must show a valid certificate."""

from __future__ import annotations

import socket
import ssl
import threading
import time

import pytest

from faden_agent.workers.executor.pull_size import missing_bytes
from tests.support.agentproc import wait_for
from tests.support.executorproc import executor_factory, prefix  # noqa: F401
from tests.support.hostileregistry import DrippingRegistry
from tests.support.scriptedhttp import ScriptedHTTP
from tests.support.selfsigned import self_signed

pytestmark = pytest.mark.docker

HONEST = "127.0.0.1:5000/faden/busybox:1"


@pytest.fixture
def dripping():
    registry = DrippingRegistry()
    yield registry
    registry.close()


def test_an_honest_pull_starts_while_three_hostile_pulls_drip(executor_factory, dripping):
    agent, ex = executor_factory()  # 3 pull slots
    for i in range(3):
        ex.send(f"hostile-{i}", "image.pull", {"image": f"{dripping.host}/hostile/x:{i}", "deadline_s": 60})
    wait_for(lambda: dripping.connections >= 3, 10, what="three size checks at the dripping registry")
    time.sleep(1.0)
    sent = time.monotonic()
    ex.send("honest", "image.pull", {"image": HONEST})
    wait_for(
        lambda: any(r["data"].get("phase") == "pull" for r in ex.timeline("honest")),
        60,
        what="the honest pull to start",
    )
    started_s = time.monotonic() - sent
    print(f"honest pull started {started_s:.2f} s after it was sent, beside 3 dripping pulls")
    assert started_s < 2.0
    assert ex.wait_terminal("honest", 60)["state"] == "succeeded"
    ex.send("cancel", "command.cancel", {"command_id": "hostile-0"})
    assert ex.wait_terminal("hostile-0", 10)["state"] == "cancelled"


def test_the_size_check_has_one_deadline_and_an_abort(docker_client, dripping):
    api = docker_client.api
    started = time.monotonic()
    assert missing_bytes(api, f"{dripping.host}/fx/img:1", None, deadline_s=1.0) is None
    deadline_figure = time.monotonic() - started
    hooks = []
    threading.Timer(0.5, lambda: [hook() for hook in hooks]).start()
    started = time.monotonic()
    assert missing_bytes(api, f"{dripping.host}/fx/img:1", None, on_abort=hooks.append, deadline_s=60) is None
    abort_figure = time.monotonic() - started
    print(f"a dripping head given up after {deadline_figure:.2f} s (deadline 1 s), {abort_figure:.2f} s (abort 0.5 s)")
    assert deadline_figure < 10 and abort_figure < 10  # a per-read timeout never ends a drip


def test_a_token_realm_elsewhere_must_show_a_valid_certificate(docker_client, tmp_path):
    """An insecure (http) registry whose realm is an https host with a self-signed certificate:
    the Basic credentials are not sent there."""
    cert, key = self_signed(tmp_path)
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(cert, key)
    listener = socket.create_server(("127.0.0.1", 0))
    received: list[bytes] = []

    def serve() -> None:
        while True:
            try:
                conn, _ = listener.accept()
            except OSError:
                return
            try:
                with context.wrap_socket(conn, server_side=True) as tls:
                    tls.settimeout(5)
                    received.append(tls.recv(65536))
                    tls.sendall(b'HTTP/1.1 200 OK\r\nContent-Length: 15\r\n\r\n{"token": "t"}\n')
            except (OSError, ssl.SSLError):
                continue

    threading.Thread(target=serve, daemon=True).start()
    registry = ScriptedHTTP()
    try:
        realm = f"https://localhost:{listener.getsockname()[1]}/token"
        registry.answer(401, b"{}", {"WWW-Authenticate": f'Bearer realm="{realm}",service="s"'})
        image = registry.url.removeprefix("http://") + "/fx/img:1"
        assert missing_bytes(docker_client.api, image, {"username": "puller", "password": "pw"}) is None
        assert registry.requests  # the registry was asked, and named the realm
    finally:
        registry.close()
        listener.close()
    assert received == [], received  # the handshake failed: no request, no credentials
