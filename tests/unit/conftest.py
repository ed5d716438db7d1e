"""Fixtures of the property tests that put hypothesis' answers on a real socket."""

from __future__ import annotations

import pytest

from faden_agent.backend.client import BackendClient
from faden_agent.config import Config, load_config
from tests.support.fuzzvalues import FUZZ_CREDENTIAL
from tests.support.scriptedhttp import ScriptedHTTP


@pytest.fixture(scope="module")
def scripted_http():
    server = ScriptedHTTP()
    yield server
    server.close()


@pytest.fixture(scope="module")
def scripted_config(scripted_http, tmp_path_factory) -> Config:
    """The agent's configuration with the backend and Loki both at `scripted_http`."""
    return load_config(
        {
            "FADEN_NODE_AGENT_BACKEND_URL": scripted_http.url,
            "FADEN_NODE_AGENT_LOKI_URL": scripted_http.url,
            "FADEN_NODE_AGENT_AGENT_ID": "fuzz",
            "FADEN_NODE_AGENT_REQUEST_TIMEOUT_SEC": "2",
            "FADEN_NODE_AGENT_STATE_PATH": str(tmp_path_factory.mktemp("s") / "state.json"),
            # absent on purpose: one answer's 503 must not hold the next example back
            "FADEN_NODE_AGENT_RUNTIME_DIR": str(tmp_path_factory.mktemp("r") / "absent"),
        }
    )


@pytest.fixture(scope="module")
def scripted_client(scripted_config):
    client = BackendClient(scripted_config, FUZZ_CREDENTIAL)
    yield client
    client.close()
