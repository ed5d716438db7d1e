"""No FADEN_NODE_AGENT_LOKI_URL: the log shipper asks the reference backend where to push
(GET /api/agent/v1/logs/target) with the node's credential, and pushes there."""

from __future__ import annotations

from pathlib import Path

from tests.support.agentproc import wait_for
from tests.support.backendproc import BackendProcess, agent_on_backend, backend  # noqa: F401 - fixtures
from tests.support.journalfiles import JournalWriter
from tests.support.lokireceiver import LokiReceiver


def journal_with(tmp_path: Path, lines: list[str]) -> JournalWriter:
    journal = JournalWriter(tmp_path / "journal")
    journal.append(journal.lines(lines, priority=5, _SYSTEMD_UNIT="gpu-burn.service"))
    return journal


def test_push_through_the_reference_backend_when_no_loki_url_is_set(tmp_path, backend, agent_on_backend):
    journal = journal_with(tmp_path, [f"through backend {i}" for i in range(20)])
    agent, node = agent_on_backend(
        journal_directory=journal.directory, log_flush_interval_sec=0.2, advertise_host="10.0.0.5"
    )
    agent_id = agent.env["FADEN_NODE_AGENT_AGENT_ID"]

    def system_lines():
        return [e for e in backend.logs(node["node_id"]) if e["labels"].get("container") == f"node-{agent_id}"]

    lines = wait_for(lambda: len(system_lines()) >= 20 and system_lines(), 30, what="20 lines at the backend")
    assert [e["line"] for e in lines] == [f"through backend {i}" for i in range(20)]
    assert lines[0]["labels"] == {
        "job": "node-agent",
        "host": "10.0.0.5",
        "agent_id": agent_id,
        "container": f"node-{agent_id}",
        "level": "notice",
    }
    assert lines[0]["ts"] == journal_entries_ts(journal)[0]
    assert lines[0]["metadata"]["unit"] == "gpu-burn.service"
    status = wait_for(
        lambda: (s := agent.workers()["logs"]["status"])["lines_shipped"] >= 20 and s,
        10,
        what="the log worker's status to show the pushes",
    )
    assert status["target"] == f"{backend.url}/api/agent/v1/logs/push"


def test_the_backend_can_name_a_loki_to_push_to_directly(tmp_path):
    with LokiReceiver() as loki:
        server = BackendProcess(tmp_path / "backend", tmp_path / "backend.log", loki_url=loki.url).start()
        try:
            from tests.support.agentproc import AgentProcess
            from tests.support.backendproc import agent_env_for

            journal = journal_with(tmp_path, ["to the named loki"])
            env = agent_env_for(server, tmp_path, journal_directory=journal.directory, log_flush_interval_sec=0.2)
            with AgentProcess(env, tmp_path / "agent.log") as agent:
                # The receiver is as strict as Loki 2.8: the plain form, the detail kept in the line.
                got = loki.wait_for(lambda e: [x for x in e if x.line.startswith("to the named loki\t")], 30)
                assert got[0].labels["agent_id"] == env["FADEN_NODE_AGENT_AGENT_ID"]
                assert "unit=gpu-burn.service" in got[0].line and got[0].metadata is None
                status = wait_for(
                    lambda: (s := agent.workers()["logs"]["status"])["lines_shipped"] >= 1 and s,
                    10,
                    what="the log worker's status to show the push",
                )
                assert status["target"] == f"{loki.url}/loki/api/v1/push"
        finally:
            server.stop()


def journal_entries_ts(journal: JournalWriter) -> list[str]:
    import subprocess

    import orjson

    out = subprocess.run(
        ["journalctl", f"--directory={journal.directory}", "--output=json"], capture_output=True, check=True
    ).stdout
    return [orjson.loads(line)["__REALTIME_TIMESTAMP"] + "000" for line in out.splitlines()]
