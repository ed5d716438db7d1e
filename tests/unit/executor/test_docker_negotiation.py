"""The API version the agent speaks with an engine: the highest both sides speak, never
below 1.40 (device requests), and the engine's refusals read from the texts real engines
(20.10 and 29.1.5) answer with."""

from __future__ import annotations

import pytest
import requests

from faden_agent.engine.client import EngineClient
from faden_agent.engine.errors import EngineTooOld, EngineUnreachable
from faden_agent.engine.sdk import make_client
from faden_agent.engine.versions import CLIENT_MAX_API, choose_api_version, is_version_refusal
from tests.support.agentproc import wait_for
from tests.support.silentserver import SilentServer

# What Docker 29.1.5 and 20.10.24 answer to a request in a version they do not speak.
TOO_OLD_29 = (
    "client version 1.41 is too old. Minimum supported API version is 1.44, "
    "please upgrade your client to a newer version"
)
TOO_NEW_20 = "client version 1.45 is too new. Maximum supported API version is 1.41"


def test_the_highest_version_both_sides_speak():
    # the SDK's newest (docker-py 7.1+: 1.45), at least what Docker 29 asks for at the least
    assert tuple(map(int, CLIENT_MAX_API.split("."))) >= (1, 44)
    assert choose_api_version("1.41", "1.12") == "1.41"  # Docker 20.10
    assert choose_api_version("1.43", "1.12") == "1.43"  # Docker 24
    assert choose_api_version("1.52", "1.44") == CLIENT_MAX_API  # Docker 29: our newest
    assert choose_api_version("1.40", "1.12") == "1.40"  # Docker 19.03: device requests came here


def test_an_engine_without_device_requests_or_above_our_newest_is_refused_with_what_to_do():
    with pytest.raises(EngineTooOld, match=r"API 1\.39 at most.*upgrade the engine"):
        choose_api_version("1.39", "1.12")
    with pytest.raises(EngineTooOld, match=r"needs API 1\.50 or newer.*upgrade the agent"):
        choose_api_version("1.60", "1.50")


def test_refusals_are_told_from_other_400s():
    assert is_version_refusal(TOO_OLD_29) and is_version_refusal(TOO_NEW_20)
    assert is_version_refusal('{"message":"' + TOO_OLD_29 + '"}')
    assert not is_version_refusal("invalid reference format: repository name must be lowercase")
    assert not is_version_refusal("conflict: unable to delete 0240c5fc7a86 (cannot be forced)")


def test_making_a_client_sends_nothing_and_a_hung_engine_leaves_it_unnegotiated(tmp_path):
    engine = SilentServer.unix(tmp_path / "hung.sock")  # accepts, never answers
    client = make_client(f"unix://{tmp_path}/hung.sock", timeout_s=0.5)
    assert engine.peers == []  # a worker's start or a heartbeat never waits on the engine
    assert client.api.negotiate() is None and client.api.engine is None  # bounded by the client's timeout
    with pytest.raises(requests.exceptions.ReadTimeout):  # the request itself, not a second /version first
        client.api.containers()
    wait_for(lambda: len(engine.held) == 2, 5, what="two connections: /version, then the request")
    assert client.api.engine is None  # asked again once the bounded wait has passed


def test_the_engine_client_too_sends_nothing_when_made_and_waits_once_on_a_hung_engine(tmp_path):
    engine = SilentServer.unix(tmp_path / "hung.sock")
    client = EngineClient(f"unix://{tmp_path}/hung.sock", timeout_s=0.5)
    assert engine.peers == []
    assert client.engine_version() is None and client.engine is None
    with pytest.raises(EngineUnreachable) as hung:
        client.containers()
    assert hung.value.timed_out
    wait_for(lambda: len(engine.held) == 2, 5, what="two connections: /version, then the request")
