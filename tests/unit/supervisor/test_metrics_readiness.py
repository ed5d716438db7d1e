"""The readiness rule of the metrics endpoint: the workers running and the link connected (or
waiting out maintenance), and a one-line reason when not."""

from __future__ import annotations

from faden_agent.supervisor.metrics.health import readiness


def running(link_state: str, **changes: str) -> dict:
    rows = [{"name": n, "state": changes.get(n, "RUNNING")} for n in ("stream", "executor", "inventory", "logs")]
    rows[0]["status"] = {"link": {"state": link_state, "last_error": "HTTP 502\nfrom the proxy"}}
    return {"workers": rows}


def test_readiness_rule():
    assert readiness(running("connected")) == (True, "ready: workers running, link connected")
    assert readiness(running("maintenance"))[0] is True  # only waiting out the backend's Retry-After
    ready, why = readiness(running("backoff"))
    assert not ready and why == "not ready: link backoff: HTTP 502 from the proxy"
    ready, why = readiness(running("connected", logs="FATAL", inventory="BACKOFF"))
    assert not ready and why == "not ready: worker inventory BACKOFF, logs FATAL"
    assert readiness({"workers": []}) == (
        False,
        "not ready: worker stream absent, executor absent, inventory absent, logs absent",
    )
