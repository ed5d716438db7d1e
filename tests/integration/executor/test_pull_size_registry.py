"""What a pull will download, asked of a registry that answers as the test scripts it (token
authentication, an index of platforms, hostile answers) on a real socket, with the real
engine's platform and held layers (read only)."""

from __future__ import annotations

import base64
from urllib.parse import parse_qs, urlsplit

import orjson
import pytest

from faden_agent.workers.executor.pull_size import INDEX_TYPES, MANIFEST_TYPES, missing_bytes
from tests.conftest import TEST_IMAGE
from tests.support.scriptedhttp import Reply, Request, ScriptedHTTP

pytestmark = pytest.mark.docker

CONFIG = "sha256:" + "c" * 64
AMD64 = "sha256:" + "a" * 64
ARM64 = "sha256:" + "b" * 64
NEW_LAYERS = ["sha256:" + "1" * 64, "sha256:" + "2" * 64]


@pytest.fixture
def registry():
    server = ScriptedHTTP()
    yield server
    server.close()


@pytest.fixture
def api(docker_client):
    return docker_client.api


def scripted(server: ScriptedHTTP, base_layer: str, manifest_body: bytes | None = None):
    host = server.url.removeprefix("http://")
    index = {
        "mediaType": INDEX_TYPES[0],
        "manifests": [
            {"digest": ARM64, "platform": {"os": "linux", "architecture": "arm64"}},
            {"digest": AMD64, "platform": {"os": "linux", "architecture": "amd64"}},
        ],
    }
    manifest = {
        "mediaType": MANIFEST_TYPES[0],
        "config": {"digest": CONFIG, "size": 10},
        "layers": [{"size": 100}, {"size": 200}, {"size": 300}],
    }
    config = {"rootfs": {"type": "layers", "diff_ids": [base_layer, *NEW_LAYERS]}}

    def answer(request: Request) -> Reply:
        path = urlsplit(request.path).path
        if path == "/token":
            query = parse_qs(urlsplit(request.path).query)
            assert query["scope"] == ["repository:fx/img:pull"] and query["service"] == ["scripted"]
            user = base64.b64decode(request.headers["Authorization"].split()[1]).decode()
            return Reply(200, orjson.dumps({"token": f"token-of-{user}"}))
        if request.headers.get("Authorization") != "Bearer token-of-puller:pw":
            challenge = f'Bearer realm="http://{host}/token",service="scripted",scope="repository:fx/img:pull"'
            return Reply(401, b"{}", {"WWW-Authenticate": challenge})
        bodies = {
            "/v2/fx/img/manifests/1": orjson.dumps(index),
            f"/v2/fx/img/manifests/{AMD64}": manifest_body or orjson.dumps(manifest),
            f"/v2/fx/img/blobs/{CONFIG}": orjson.dumps(config),
        }
        return Reply(200, bodies[path]) if path in bodies else Reply(404, b"{}")

    server.script = answer
    return f"{host}/fx/img:1"


def held_base(api) -> str:
    return api.inspect_image(TEST_IMAGE)["RootFS"]["Layers"][0]


def test_the_layers_the_engine_lacks_of_this_platform_behind_token_auth(registry, api):
    if api.info()["Architecture"] != "x86_64":
        pytest.skip("the scripted index names amd64 for this machine")
    image = scripted(registry, held_base(api))
    assert missing_bytes(api, image, {"username": "puller", "password": "pw"}) == 200 + 300  # the base is held
    paths = [urlsplit(r.path).path for r in registry.requests]
    assert f"/v2/fx/img/manifests/{AMD64}" in paths and f"/v2/fx/img/manifests/{ARM64}" not in paths
    image = scripted(registry, "sha256:" + "9" * 64)  # a base the engine does not hold
    assert missing_bytes(api, image, {"username": "puller", "password": "pw"}) == 600


@pytest.mark.parametrize(
    "body",
    [
        b"{" + b" " * (5 << 20) + b"}",  # over the 4 MiB cap
        b"not json",
        b"[1, 2]",
        orjson.dumps({"config": {"digest": CONFIG}, "layers": [{"size": 1}]}),  # 1 layer, 3 diff ids
        orjson.dumps({"config": {"digest": "sha256:../../x"}, "layers": []}),
        orjson.dumps({"config": {"digest": CONFIG}, "layers": [{"size": -5}, {"size": 1}, {"size": 1}]}),
        orjson.dumps({"config": {"digest": CONFIG}, "layers": [{"size": 1e308}, {"size": 1e308}, {"size": 1}]}),
        b'{"config": {"digest": "%s"}, "layers": [{"size": %d}, {"size": 1}, {"size": 1}]}'
        % (CONFIG.encode(), 10**400),
        orjson.dumps({"mediaType": INDEX_TYPES[0], "manifests": ["x", 5]}),  # index entries that are no objects
    ],
)
def test_an_answer_that_does_not_tell_leaves_the_size_unknown(registry, api, body):
    image = scripted(registry, held_base(api), manifest_body=body)
    assert missing_bytes(api, image, {"username": "puller", "password": "pw"}) is None


def test_refused_credentials_or_no_registry_leave_the_size_unknown(registry, api):
    image = scripted(registry, held_base(api))
    assert missing_bytes(api, image, {"username": "other", "password": "pw"}) is None  # its token is refused
    assert missing_bytes(api, image, None) is None
    assert missing_bytes(api, "127.0.0.1:9/fx/img:1", None) is None  # nothing listens there


def test_credentials_never_go_in_clear_text_to_another_host(registry, api):
    image = scripted(registry, held_base(api))
    elsewhere = ScriptedHTTP()  # another host: an http token realm there gets no credentials
    try:
        elsewhere.answer(200, orjson.dumps({"token": "anonymous"}))
        challenge = f'Bearer realm="{elsewhere.url.replace("127.0.0.1", "localhost")}/token",service="s"'
        registry.answer(401, b"{}", {"WWW-Authenticate": challenge})
        assert missing_bytes(api, image, {"username": "puller", "password": "pw"}) is None
        assert elsewhere.requests and all("Authorization" not in r.headers for r in elsewhere.requests)
    finally:
        elsewhere.close()


def test_a_registry_dripping_its_answer_meets_the_deadline(api, monkeypatch):
    """One byte every 0.2 s of a 64 KiB answer: given up at the answer deadline, not after
    the whole chunk trickled in."""
    import socket
    import threading
    import time

    from faden_agent.workers.executor import pull_size

    monkeypatch.setattr(pull_size, "ANSWER_DEADLINE_S", 1.0)
    listener = socket.create_server(("127.0.0.1", 0))
    stop = threading.Event()

    def drip() -> None:
        conn, _ = listener.accept()
        with conn:
            conn.recv(65536)
            conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 65536\r\n\r\n")
            while not stop.wait(0.2):
                try:
                    conn.sendall(b" ")
                except OSError:
                    return

    threading.Thread(target=drip, daemon=True).start()
    host = f"127.0.0.1:{listener.getsockname()[1]}"
    started = time.monotonic()
    try:
        assert missing_bytes(api, f"{host}/fx/img:1", None) is None  # unknown: no check, no hang
    finally:
        stop.set()
        listener.close()
    assert time.monotonic() - started < 5.0
