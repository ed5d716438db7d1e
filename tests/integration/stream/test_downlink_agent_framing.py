"""The real agent's stream worker on a downlink written with each framing: commands
arrive while the connection stays open, an over-size command is rejected once (too_large),
a command on a 12 MiB line is named by the line's beginning and rejected too_large without the
line being held, and the stream worker's peak RSS stays under
PEAK_RSS_BOUND_MIB: a Content-Length or close-delimited answer is read line by line, not
whole before its first line is looked at (then commands would arrive only at its close)."""

from __future__ import annotations

import os

import orjson
import pytest

from faden_agent import protocol
from tests.support.agentproc import AgentProcess, agent_env, peak_rss_mib, wait_for
from tests.support.sampleworkers import supervisor_argv
from tests.support.scriptedhttp import StreamingHTTP

pytestmark = pytest.mark.docker

STREAM_AND_EXECUTOR = supervisor_argv(
    {
        "stream": "faden_agent.workers.stream.worker:StreamWorker",
        "executor": "faden_agent.workers.executor.worker:ExecutorWorker",
    }
)
PEAK_RSS_BOUND_MIB = 80  # the stream worker's VmHWM, whatever the backend sends
BIG_LINE_BYTES = 12 * 1024 * 1024


def command(command_id: str, seq: int, spec=None) -> bytes:
    return orjson.dumps({"type": "command", "id": command_id, "seq": seq, "kind": "no.such.kind", "spec": spec or {}})


def terminal(server: StreamingHTTP, command_id: str):
    return next((r for r in server.timeline(command_id) if r["state"] in protocol.TERMINAL_STATES), None)


@pytest.mark.parametrize("framing, gzip", [("length", False), ("close", False), ("chunked", True)])
def test_commands_arrive_on_an_open_connection_and_memory_stays_bounded(tmp_path, docker_client, framing, gzip):
    server = StreamingHTTP(framing, gzip)
    env = agent_env(
        tmp_path,
        backend_url=server.url,
        enrollment_token="tok",
        agent_id="framing-agent",
        stream_keepalive_sec=0.5,
        reconnect_min_sec=0.2,
        reconnect_max_sec=1,
        heartbeat_interval_sec=1,
    )
    try:
        with AgentProcess(env, tmp_path / "agent.log", argv=STREAM_AND_EXECUTOR) as agent:
            wait_for(lambda: server.streams_open == 1, 20, what="the stream open")
            server.put(command("fr-1", 1))
            wait_for(lambda: terminal(server, "fr-1"), 20, what="fr-1 handled")
            assert server.streams_open == 1 and server.streams_opened == 1  # while the answer goes on
            # An over-size command: acked, rejected once; a line past the line cap: skipped unheld,
            # its command named by the line's first bytes and rejected all the same.
            server.put(command("fr-2", 2, {"x": os.urandom(protocol.MAX_COMMAND_BYTES // 2).hex()}))
            server.put(
                orjson.dumps(
                    {
                        "type": "command",
                        "id": "fr-3",
                        "seq": 3,
                        "kind": "no.such.kind",
                        "spec": {"x": os.urandom(BIG_LINE_BYTES // 2).hex()},
                    }
                )
            )
            server.put(command("fr-4", 4))
            wait_for(lambda: terminal(server, "fr-4"), 30, what="fr-4 handled after the big lines")
            too_large = terminal(server, "fr-2")
            assert (too_large["state"], too_large["reason"]) == ("rejected", "too_large"), too_large
            over_cap = wait_for(lambda: terminal(server, "fr-3"), 10, what="fr-3 (on the over-cap line) answered")
            assert (over_cap["state"], over_cap["reason"]) == ("rejected", "too_large"), over_cap
            assert (terminal(server, "fr-4")["reason"], server.streams_opened) == ("unknown_kind", 1)
            stream = agent.workers()["stream"]
            peak = peak_rss_mib(stream["pid"])
            print(f"stream worker peak RSS ({framing}{', gzip' if gzip else ''}): {peak:.1f} MiB")
            assert peak < PEAK_RSS_BOUND_MIB, peak
            assert stream["restarts"] == 0 and agent.workers()["executor"]["restarts"] == 0
            assert "is on a stream line of" in agent.log_text()
    finally:
        server.close()
