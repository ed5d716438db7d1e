"""faden_agent/engine/client.py against the real engine under test (20.10, or 29 under
FADEN_TEST_ENGINE=29): events followed and closed from another thread, logs as frames per
stream or raw from a TTY, followed and closed, the engine's refusals typed; and an engine over
TLS that asks for the agent's certificate (DOCKER_TLS_VERIFY, DOCKER_CERT_PATH)."""

from __future__ import annotations

import http.server
import shutil
import ssl
import threading
import time
import uuid

import orjson
import pytest

from faden_agent.engine import containers
from faden_agent.engine.client import EngineClient
from faden_agent.engine.errors import ApiError, EngineUnreachable, NotFound
from tests.support.privateca import make_ca_and_server_cert

IMAGE = "faden-test/busybox:1"


@pytest.fixture
def engine(docker_client):
    client = EngineClient(None, 30)
    yield client
    client.close()


@pytest.fixture
def run(docker_client):
    made = []

    def start(command: str, **options):
        container = docker_client.containers.run(
            IMAGE, ["sh", "-c", command], name=f"engine-client-{uuid.uuid4().hex[:8]}", detach=True, **options
        )
        made.append(container)
        return container

    yield start
    for container in made:
        container.remove(force=True)


def test_events_are_followed_and_a_close_from_another_thread_ends_them(engine, run):
    label = f"engine-client-{uuid.uuid4().hex[:8]}"
    stream = engine.events(filters={"type": "container", "label": f"{label}=1"})
    seen: list[str] = []
    reader = threading.Thread(target=lambda: seen.extend(event.get("Action", "") for event in stream))
    reader.start()
    run("exit 3", labels={label: "1"})
    deadline = time.monotonic() + 30
    while "die" not in seen and time.monotonic() < deadline:
        time.sleep(0.05)
    assert seen[:3] == ["create", "start", "die"]
    closed = time.monotonic()
    stream.close()
    reader.join(5)
    assert not reader.is_alive() and time.monotonic() - closed < 2 and stream.broken == ""


def test_logs_come_as_one_frame_each_or_raw_from_a_tty(engine, run, docker_client):
    plain = run("echo out; echo err >&2")
    tty = run("echo one; echo two >&2", tty=True)
    for container in (plain, tty):
        container.wait(timeout=30)
    view = containers.get(engine, plain.id)
    assert list(view.logs(stdout=True, stderr=False)) == [b"out\n"]
    assert list(view.logs(stdout=False, stderr=True)) == [b"err\n"]
    assert view.logs(tail=1).read_all(100) in (b"out\n", b"err\n")  # the later of the two, by the engine's stamps
    stamped = list(view.logs(timestamps=True))
    assert sorted(frame.split(b" ", 1)[1] for frame in stamped) == [b"err\n", b"out\n"]
    assert b"".join(containers.get(engine, tty.id).logs()) == b"one\r\ntwo\r\n"  # one stream, as the TTY wrote it


def test_a_followed_log_ends_with_its_container_or_a_close(engine, run):
    short = containers.get(engine, run("echo a; sleep 1; echo b").id)
    assert list(short.logs(follow=True)) == [b"a\n", b"b\n"]  # ends when the container does
    endless = containers.get(engine, run("echo up; sleep 600").id)
    stream = endless.logs(follow=True)
    got: list[bytes] = []
    reader = threading.Thread(target=lambda: got.extend(stream))
    reader.start()
    time.sleep(1)
    stream.close()
    reader.join(5)
    assert not reader.is_alive() and got == [b"up\n"]


def test_the_engines_refusals_are_typed(engine, run):
    with pytest.raises(NotFound, match="No such container"):
        engine.inspect_container("no-such-container-" + uuid.uuid4().hex)
    with pytest.raises(NotFound):
        engine.inspect_image("faden-test/no-such-image:1")
    with pytest.raises(ApiError) as bad:
        engine.containers(filters={"no-such-filter": "x"})
    assert bad.value.status_code == 400 and "no-such-filter" in bad.value.explanation
    container = containers.get(engine, run("true").id)
    container.engine.http.close()  # a closed connection: the next read opens another
    container.reload()
    assert container.status in ("running", "exited")


class _TLSEngine(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def do_GET(self) -> None:
        body = orjson.dumps({"Version": "29.1.5", "ApiVersion": "1.52", "MinAPIVersion": "1.44"})
        if self.path.endswith("/containers/json?all=0&limit=-1"):
            body = b"[]"
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args) -> None:
        pass


def test_an_engine_over_tls_gets_the_certificate_of_docker_cert_path(tmp_path, monkeypatch):
    ca, cert, key = make_ca_and_server_cert(tmp_path)
    certs = tmp_path / "docker-certs"
    certs.mkdir()
    for source, name in ((ca, "ca.pem"), (cert, "cert.pem"), (key, "key.pem")):
        shutil.copy(source, certs / name)
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _TLSEngine)
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH, cafile=str(ca))
    context.verify_mode = ssl.CERT_REQUIRED  # dockerd --tlsverify: no client certificate, no answer
    context.load_cert_chain(cert, key)
    server.socket = context.wrap_socket(server.socket, server_side=True)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        monkeypatch.setenv("DOCKER_HOST", f"tcp://127.0.0.1:{server.server_address[1]}")
        monkeypatch.setenv("DOCKER_TLS_VERIFY", "1")
        monkeypatch.setenv("DOCKER_CERT_PATH", str(certs))
        for name in ("HTTPS_PROXY", "https_proxy", "ALL_PROXY", "all_proxy"):
            monkeypatch.delenv(name, raising=False)
        client = EngineClient(None, 5)
        assert client.base_url.startswith("https://") and client.containers() == []
        assert client.engine is not None and client.engine.api_in_use == "1.45"
        (certs / "cert.pem").unlink()  # without our certificate the engine refuses the handshake
        (certs / "key.pem").unlink()
        with pytest.raises(EngineUnreachable):
            EngineClient(None, 5).ping()
        monkeypatch.setenv("DOCKER_HOST", "ssh://ops@engine.example")
        with pytest.raises(EngineUnreachable, match="only unix://, tcp://"):
            EngineClient(None, 5)
    finally:
        server.shutdown()
        server.server_close()
