"""The agent's configuration for a test of one of its HTTP clients: the backend at a URL, state and
runtime directories under the test's tmp_path, a short request timeout."""

from __future__ import annotations

from faden_agent.config import load_config


def config_for(url: str, tmp_path, **overrides):
    env = {
        "FADEN_NODE_AGENT_BACKEND_URL": url,
        "FADEN_NODE_AGENT_STATE_PATH": str(tmp_path / "s" / "state.json"),
        "FADEN_NODE_AGENT_RUNTIME_DIR": str(tmp_path / "run"),
        "FADEN_NODE_AGENT_REQUEST_TIMEOUT_SEC": "2",
    }
    env.update({f"FADEN_NODE_AGENT_{k.upper()}": str(v) for k, v in overrides.items()})
    return load_config(env)
