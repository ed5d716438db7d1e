"""The /version answers a broken or hostile engine socket gives (tests/support/scriptedengine.py,
a real socket), to both clients of the engine (engine/client.py, the idle reads'; the Docker
SDK's, the commands'): an odd version never reaches a request path, an empty or refused one is
one clear failure kept briefly (not a /version per call), the read is bounded in bytes and in
total time, and the SDK's version cache does not grow with what engines say."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import NamedTuple

import docker
import pytest

from faden_agent.engine import containers
from faden_agent.engine.client import EngineClient
from faden_agent.engine.errors import EngineTooOld, EngineVersionError
from faden_agent.engine.sdk import engine_version, make_client
from faden_agent.engine.versions import CLIENT_MAX_API, FAILURE_KEPT_S, VERSION_BYTES, EngineVersion, choose_api_version
from tests.support.scriptedengine import ScriptedEngine, dripped, head, raw, version_json


@pytest.fixture
def engine(tmp_path):
    started: list[ScriptedEngine] = []

    def start(answer) -> ScriptedEngine:
        started.append(made := ScriptedEngine(tmp_path / f"engine-{len(started)}.sock", answer))
        return made

    yield start
    for made in started:
        made.close()


class Reader(NamedTuple):
    """One client's container list and negotiated versions (as found, or negotiating now)."""

    list: Callable[[], list]
    found: Callable[[], EngineVersion | None]
    negotiated: Callable[[], EngineVersion | None]


def sdk_reader(host: str, timeout_s: float) -> Reader:
    client = make_client(host, timeout_s=timeout_s)
    return Reader(lambda: client.containers.list(), lambda: client.api.engine, lambda: engine_version(client))


def engine_reader(host: str, timeout_s: float) -> Reader:
    client = EngineClient(host, timeout_s)
    return Reader(lambda: containers.listed(client), lambda: client.engine, client.engine_version)


@pytest.fixture(params=[engine_reader, sdk_reader], ids=["engine", "sdk"])
def reader(request) -> Callable[[str, float], Reader]:
    return request.param


@pytest.mark.parametrize("odd", ["1.4_4", "1.44\n", " 1.44", "1.44.0", "v1.44", "1.", "", "1e2", "1.44/../..", 1.44])
def test_an_odd_version_is_one_clear_failure_and_never_in_a_request_path(engine, reader, odd):
    scripted = engine(version_json(odd))
    client = reader(scripted.host, 5)
    with pytest.raises(EngineVersionError, match=r"/version gives ApiVersion .*: not an API version") as caught:
        client.list()
    assert "\n" not in str(caught.value)
    assert scripted.paths == ["/version"]  # no request was sent with it


def test_a_version_is_used_in_its_canonical_form(engine, reader):
    scripted = engine(version_json("1.041", "01.12"))
    client = reader(scripted.host, 5)
    assert client.list() == []
    assert scripted.paths[1].startswith("/v1.41/containers/json")
    negotiated = client.negotiated()
    assert negotiated is not None and (negotiated.api_version, negotiated.min_api_version) == ("1.41", "1.12")


@pytest.mark.parametrize(
    ("answer", "why"),
    [
        (version_json(""), "gives ApiVersion ''"),
        (version_json(None), "gives ApiVersion NoneType"),
        (version_json("1.39"), "API 1.39 at most"),
        (version_json("1.44", "1.99"), "needs API 1.99 or newer"),
        (raw(head(200, 9) + b"not json!"), "is not JSON"),
    ],
)
def test_an_unusable_answer_fails_every_call_for_a_while_without_asking_again(engine, reader, answer, why):
    scripted = engine(answer)
    client = reader(scripted.host, 5)
    for _ in range(20):
        with pytest.raises(EngineVersionError, match=why):
            client.list()
    assert scripted.versions_asked() == 1 and scripted.paths == ["/version"]
    time.sleep(FAILURE_KEPT_S + 0.1)
    with pytest.raises(EngineVersionError, match=why):
        client.list()
    assert scripted.versions_asked() == 2  # asked again once the failure was old


def test_a_refused_range_is_engine_too_old():
    with pytest.raises(EngineTooOld):
        choose_api_version("1.39", "1.12")
    with pytest.raises(EngineVersionError, match="MinAPIVersion '1.x'"):
        choose_api_version("1.41", "1.x")


def test_an_answer_over_the_byte_bound_is_refused(engine, reader):
    body = b'{"ApiVersion": "1.41", "Pad": "' + b"x" * (4 * VERSION_BYTES) + b'"}'
    scripted = engine(raw(head(200, len(body)) + body))
    client = reader(scripted.host, 5)
    with pytest.raises(EngineVersionError, match=f"over {VERSION_BYTES} bytes"):
        client.list()


@pytest.mark.parametrize("part", ["head", "body"])
def test_a_drip_fed_version_holds_a_call_no_longer_than_its_deadline(engine, reader, part):
    """A byte every 0.1 s for 20 s (a per-read timeout never fires): the call goes on after
    the client's 2 s, unnegotiated, and the engine's own answer to it decides."""
    body = b'{"ApiVersion": "1.41", "MinAPIVersion": "1.12", "Pad": "' + b"x" * 200 + b'"}'
    data = head(200, len(body)) + body
    scripted = engine(dripped(data, 0.1, then=0 if part == "head" else len(data) - len(body)))
    client = reader(scripted.host, 2)
    started = time.monotonic()
    assert client.list() == []
    took = time.monotonic() - started
    print(f"a drip-fed /version {part}: the call returned after {took:.2f} s (deadline 2 s)")
    assert took < 3.0
    assert client.found() is None and scripted.paths[1].startswith("/v1.41/")
    started = time.monotonic()
    client.list()  # the drip still holds its thread: no second /version, no wait
    assert time.monotonic() - started < 1.0 and scripted.versions_asked() == 1


def test_the_sdks_version_cache_does_not_grow_with_what_engines_say(engine):
    """docker.utils.compare_version keeps every pair it was asked (an lru_cache without a
    bound): only canonical versions between ours and 1.40 ever reach it."""
    cache = docker.utils.utils.compare_version
    before = cache.cache_info().currsize
    for i in range(30):
        scripted = engine(version_json(f"1.{40 + i % 100}", "1.12"))
        odd = engine(version_json("1." + "4" * 1000 + str(i)))
        make_client(scripted.host, timeout_s=5).containers.list()
        with pytest.raises(EngineVersionError):
            make_client(odd.host, timeout_s=5).containers.list()
    grown = cache.cache_info().currsize - before
    print(f"compare_version cache: +{grown} entries over 60 engines")
    assert grown <= 12  # the six versions from 1.40 to ours, each beside the SDK's constants
    assert CLIENT_MAX_API.count(".") == 1


def test_a_local_engine_gets_no_netrc_login_and_no_proxy(engine, reader, tmp_path, monkeypatch):
    netrc = tmp_path / "netrc"
    netrc.write_text("machine localhost login agent password s3cret\n")
    netrc.chmod(0o600)
    monkeypatch.setenv("NETRC", str(netrc))
    monkeypatch.setenv("HTTP_PROXY", "http://127.0.0.1:9")
    scripted = engine(version_json("1.44"))
    assert reader(scripted.host, 5).list() == []
    assert scripted.paths[0] == "/version" and scripted.paths[1].startswith("/v1.44/containers/json?")
    assert not [h for h in scripted.heads if b"authorization" in h.lower()], scripted.heads
    assert make_client("tcp://127.0.0.1:2375", timeout_s=5).api.trust_env  # a remote engine's proxy is kept
    remote = EngineClient("tcp://127.0.0.1:2375", 5)  # over TCP: the environment's proxies apply (http/client.py)
    assert (remote.base_url, remote.http.unix_socket) == ("http://127.0.0.1:2375", "")
