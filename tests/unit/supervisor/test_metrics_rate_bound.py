"""/metrics scraped in a loop by a local process: scrapes within RENDER_EVERY_S
get the last body; the supervisor reads its table once for them, per format."""

from __future__ import annotations

from faden_agent.config import load_config
from faden_agent.supervisor.metrics.endpoint import MetricsEndpoint


def test_repeated_scrapes_are_answered_from_the_last_body(tmp_path):
    config = load_config({"FADEN_NODE_AGENT_RUNTIME_DIR": str(tmp_path / "run")})
    reads = []

    def table():
        reads.append(1)
        return {}

    endpoint = MetricsEndpoint(config, table, dict)
    try:
        bodies = {endpoint.answer("GET", "/metrics", {})[2] for _ in range(100)}
        assert len(reads) == 1 and len(bodies) == 1
        openmetrics = endpoint.answer("GET", "/metrics", {"accept": "application/openmetrics-text"})
        assert openmetrics[1].startswith("application/openmetrics-text") and len(reads) == 2
    finally:
        endpoint.close()
