"""The metrics endpoint of a real agent: every family present, each moving when its cause
happens (worker killed, backend outage, Loki 429 and 400), a SIGSTOPped worker never
holding a scrape, bad input at the port, an address in use. Parsed with prometheus_client."""

from __future__ import annotations

import http.client
import os
import select
import signal
import socket
import subprocess
import sys
import time

import orjson
import pytest

from faden_agent.protocol.metrics import METRICS, PREFIX
from tests.support.agentproc import AgentProcess, agent_env, wait_for
from tests.support.backendproc import agent_on_backend, backend, free_port  # noqa: F401
from tests.support.journalfiles import JournalWriter
from tests.support.lokireceiver import LokiReceiver
from tests.support.metricsclient import endpoint, get, promtool_check, value_of

# Every declared family as prometheus_client's 0.0.4 parser names and types it (no info type).
FAMILIES = {
    PREFIX + m.name + ("_info" if m.type == "info" else ""): "gauge" if m.type == "info" else m.type for m in METRICS
}
UNKNOWN_KIND = "no.such.kind"  # rejected by the executor: a real ended command without Docker work
WORKERS = ("stream", "executor", "inventory", "logs", "peer")


def state_of(scrape, worker: str) -> str | None:
    states = [s for s in scrape.families()["faden_agent_worker_state"].samples if s.labels["worker"] == worker]
    return next((s.labels["state"] for s in states if s.value == 1), None)


def link_state(scrape) -> str | None:
    return next((s.labels["state"] for s in scrape.families()["faden_agent_link_state"].samples if s.value == 1), None)


def test_every_family_is_there_and_a_killed_worker_counts_a_restart(backend, agent_on_backend):
    agent, node = agent_on_backend()
    scrape = get(agent)
    assert scrape.status == 200 and scrape.content_type.startswith("text/plain; version=0.0.4")
    families = scrape.families()
    assert {name: family.type for name, family in families.items()} == FAMILIES  # the declared ones, no other
    assert all(name.startswith("faden_agent_") for name in families)
    info = families["faden_agent_build_info"].samples[0].labels
    assert {"version", "protocol", "python", "arch"} <= set(info)
    processes = {s.labels["process"] for s in families["faden_agent_process_cpu_seconds"].samples}
    assert processes >= {"supervisor", *WORKERS}
    assert {state_of(scrape, w) for w in WORKERS} == {"RUNNING"}
    assert link_state(scrape) == "connected"
    assert scrape.value("faden_agent_disk_free_bytes", role="state") > 0

    command_id = backend.send_command(node["node_id"], UNKNOWN_KIND)
    backend.wait_command(command_id)
    ended = wait_for(
        lambda: value_of(agent, "faden_agent_commands_ended_total", kind="other", state="rejected"),
        15,
        what="the rejected command counted",
    )
    assert ended == 1
    assert value_of(agent, "faden_agent_commands_received_total", kind="other") == 1

    before = value_of(agent, "faden_agent_worker_restarts_total", worker="executor")
    os.kill(agent.workers()["executor"]["pid"], signal.SIGKILL)
    after = wait_for(
        lambda: (s := get(agent)).value("faden_agent_worker_restarts_total", worker="executor") == before + 1 and s,
        15,
        what="the restart counted",
    )
    assert after.value("faden_agent_worker_last_exit", worker="executor", cause="signal_SIGKILL") == 1
    wait_for(lambda: state_of(get(agent), "executor") == "RUNNING", 15, what="executor RUNNING again")
    assert value_of(agent, "faden_agent_worker_restarts_total", worker="stream") == 0
    # Prometheus' own linter over this real scrape (names, units, counter suffixes, HELP).
    assert promtool_check(get(agent).body) == ""


def test_a_backend_outage_shows_in_the_link_the_outbox_and_readyz(backend, agent_on_backend):
    agent, node = agent_on_backend()
    assert get(agent, "/readyz").status == 200
    assert value_of(agent, "faden_agent_link_reconnects_total") == 0
    backend.kill()
    down = wait_for(
        lambda: (s := get(agent)).value("faden_agent_outbox_records") and link_state(s) != "connected" and s,
        20,
        what="link down and records waiting",
    )
    print(f"during the outage: link {link_state(down)}, outbox {down.value('faden_agent_outbox_records')}")
    ready = get(agent, "/readyz")
    assert ready.status == 503 and b"link" in ready.body and ready.body.count(b"\n") == 1
    assert get(agent, "/healthz").status == 200
    backend.start()
    wait_for(lambda: link_state(get(agent)) == "connected", 20, what="link connected again")
    assert value_of(agent, "faden_agent_link_reconnects_total") >= 1
    wait_for(lambda: value_of(agent, "faden_agent_outbox_records") == 0, 20, what="the outbox drained")
    assert get(agent, "/readyz").status == 200


def test_a_sigstopped_worker_never_holds_a_scrape_and_its_figures_age(backend, agent_on_backend):
    agent, _ = agent_on_backend(worker_hang_timeout_sec=30)
    pid = agent.workers()["logs"]["pid"]
    os.kill(pid, signal.SIGSTOP)
    try:
        time.sleep(2)
        times = []
        for _ in range(5):
            scrape = get(agent)
            times.append(scrape.seconds)
            assert scrape.status == 200
        age = scrape.value("faden_agent_worker_liveness_age_seconds", worker="logs")
        print(f"scrapes with the log worker stopped: {[round(t * 1000, 1) for t in times]} ms; its age {age:.1f} s")
        assert max(times) < 2.0
        assert age >= 1.5
        assert scrape.value("faden_agent_worker_liveness_age_seconds", worker="stream") < 1.5
    finally:
        os.kill(pid, signal.SIGCONT)


def test_openmetrics_when_asked(backend, agent_on_backend):
    agent, _ = agent_on_backend()
    from prometheus_client.openmetrics.parser import text_string_to_metric_families as openmetrics_families

    scrape = get(agent, accept="application/openmetrics-text; version=1.0.0,text/plain;q=0.5")
    assert scrape.status == 200 and scrape.content_type.startswith("application/openmetrics-text")
    names = {f.name for f in openmetrics_families(scrape.body.decode())}
    assert {"faden_agent_worker_restarts", "faden_agent_log_push_duration_seconds"} <= names


def start_logs_agent(tmp_path, loki, journal, **overrides) -> AgentProcess:
    env = agent_env(
        tmp_path, loki_url=loki.url, journal_directory=journal, log_flush_interval_sec=0.2, agent_id="m-node"
    )
    env.update({f"FADEN_NODE_AGENT_{k.upper()}": str(v) for k, v in overrides.items()})
    return AgentProcess(env, tmp_path / "agent.log")


def test_loki_429_and_400_move_the_retry_refused_and_push_counters(tmp_path):
    journal = JournalWriter(tmp_path / "journal")
    journal.append(journal.lines([f"line {i}" for i in range(50)]))
    with LokiReceiver(version="3", reject_older_than_s=30 * 60) as loki:
        loki.set_mode("throttle", retry_after=0.3)
        with start_logs_agent(tmp_path, loki, journal.directory) as agent:
            wait_for(lambda: loki.statuses.get(429, 0) >= 2, 20, what="two 429s")
            throttled = wait_for(
                lambda: (s := get(agent)).value("faden_agent_log_push_retries_by_status_total", status="429") and s,
                10,
                what="429 retries in the metrics",
            )
            # The new name carries the label; the old one (repeating it) stays one release, equal.
            assert throttled.value("faden_agent_log_push_retries_total", status="429") >= 1
            assert throttled.value("faden_agent_log_push_retries_total", status="429") == throttled.value(
                "faden_agent_log_push_retries_by_status_total", status="429"
            )
            assert throttled.value("faden_agent_log_target_state", state="failing") == 1
            loki.set_mode("ok")
            shipped = wait_for(
                lambda: (s := get(agent)).value("faden_agent_log_pushed_lines_total") >= 50 and s,
                20,
                what="the lines shipped",
            )
            assert shipped.value("faden_agent_log_lines_read_total", source="journal") >= 50
            assert shipped.value("faden_agent_log_pushed_bytes_total") > 0
            assert shipped.value("faden_agent_log_push_duration_seconds_count") >= 1
            assert shipped.value("faden_agent_log_target_state", state="ok") == 1
            forty_minutes_ago = time.time_ns() // 1000 - 40 * 60 * 10**6  # older than the receiver takes
            journal.append([journal.entry("too old", 6, realtime_us=forty_minutes_ago)])
            wait_for(
                lambda: value_of(agent, "faden_agent_log_rejected_lines_total") == 1, 20, what="a refused line counted"
            )


def test_bad_input_at_the_port_gets_an_error_or_a_close_and_stalls_nothing(backend, agent_on_backend):
    agent, _ = agent_on_backend()
    host, port = endpoint(agent)

    def ask(raw: bytes) -> bytes:
        with socket.create_connection((host, port), timeout=10) as sock:
            sock.sendall(raw)
            chunks = []
            while chunk := sock.recv(65536):
                chunks.append(chunk)
            return b"".join(chunks)

    assert ask(b"GET /nope HTTP/1.1\r\nHost: x\r\n\r\n").startswith(b"HTTP/1.1 404")
    assert ask(b"POST /metrics HTTP/1.1\r\nContent-Length: 0\r\n\r\n").startswith(b"HTTP/1.1 405")
    assert ask(b"\x16\x03\x01\x02\x00garbage\r\n\r\n").startswith(b"HTTP/1.1 400")
    assert ask(b"GET /metrics HTTP/1.1\r\nX-Huge: " + b"a" * 200_000 + b"\r\n\r\n")[:12] in (b"HTTP/1.1 431", b"")

    # 1,000 connections at once, each with half a request, then silent: the oldest make way.
    flood = []
    for _ in range(1000):
        try:
            flood.append(socket.create_connection((host, port), timeout=5))
            flood[-1].sendall(b"GET /metrics HTTP/1.1\r\n")
        except OSError:
            break
    started = time.monotonic()
    scrape = get(agent)
    ps_started = time.monotonic()
    assert agent.ps(timeout_s=2) is not None
    print(
        f"{len(flood)} idle connections open: scrape {scrape.seconds * 1000:.1f} ms, "
        f"ps {(time.monotonic() - ps_started) * 1000:.1f} ms"
    )
    assert scrape.status == 200 and time.monotonic() - started < 5
    assert scrape.value("faden_agent_metrics_connections_dropped_total") >= len(flood) - 40
    for sock in flood:
        sock.close()
    # A slow client (a byte now and then, never a whole head) is closed at its deadline.
    with socket.create_connection((host, port), timeout=1) as slow:
        opened, closed = time.monotonic(), False
        while not closed and time.monotonic() - opened < 15:
            try:
                slow.sendall(b"X")
                closed = bool(select.select([slow], [], [], 0.5)[0]) and slow.recv(100) == b""
            except OSError:  # a reset or a broken pipe: closed as well
                closed = True
        took = time.monotonic() - opened
    print(f"the slow client was closed after {took:.1f} s")
    assert closed and took < 15
    assert all(w["restarts"] == 0 and w["state"] == "RUNNING" for w in agent.workers().values())


def test_an_address_in_use_is_a_status_in_ps_not_a_crash(tmp_path):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen(1)
        port = taken.getsockname()[1]
        env = agent_env(tmp_path, metrics_addr=f"127.0.0.1:{port}")
        with AgentProcess(env, tmp_path / "agent.log") as agent:
            metrics = agent.ps()["supervisor"]["metrics"]
            assert metrics["listening"] is False and f"127.0.0.1:{port}" in metrics["error"]
            assert "in use" in metrics["error"]
            time.sleep(1)
            assert agent.proc.poll() is None and agent.ps()["supervisor"]["metrics"] == metrics
            ps = subprocess.run(
                [sys.executable, "-m", "faden_agent", "ps"], env=env, capture_output=True, text=True, timeout=60
            )
            line = next(line for line in ps.stdout.splitlines() if line.startswith("metrics"))
            assert line.split(None, 1)[1] == f"NOT SERVING: {metrics['error']}"
            check = doctor_check(env, "metrics")
            assert check["status"] == "fail" and "in use" in check["detail"], check
            assert "FADEN_NODE_AGENT_METRICS_ADDR" in check["hint"]


def doctor_check(env: dict[str, str], name: str) -> dict:
    done = subprocess.run(
        [sys.executable, "-m", "faden_agent", "doctor", "--json"], env=env, capture_output=True, text=True, timeout=120
    )
    return next(c for c in orjson.loads(done.stdout)["checks"] if c["name"] == name)


def test_doctor_reports_the_endpoint_and_readyz(backend, agent_on_backend):
    agent, _ = agent_on_backend()
    check = doctor_check(agent.env, "metrics")
    host, port = endpoint(agent)
    assert check["status"] == "ok", check
    assert (
        check["detail"] == f"serving http://{host}:{port}/metrics; /readyz 200: ready: workers running, link connected"
    )
    agent.stop()
    check = doctor_check(agent.env, "metrics")
    assert check["status"] == "ok" and check["detail"].startswith("agent not running"), check


def test_off_serves_nothing(tmp_path):
    env = agent_env(tmp_path, metrics_addr="off")
    with AgentProcess(env, tmp_path / "agent.log") as agent:
        assert agent.ps()["supervisor"]["metrics"] == {"addr": "off", "listening": False, "error": None}


@pytest.mark.parametrize("path", ["/healthz", "/readyz"])
def test_health_paths_answer_one_line(backend, agent_on_backend, path):
    agent, _ = agent_on_backend()
    reply = get(agent, path)
    assert reply.status == 200 and reply.body.count(b"\n") == 1
    conn = http.client.HTTPConnection(*endpoint(agent), timeout=5)
    conn.request("HEAD", path)
    assert conn.getresponse().status == 200
    conn.close()


@pytest.mark.docker
def test_an_image_served_to_a_peer_moves_the_served_bytes_and_transfers(backend, agent_on_backend, docker_client):
    """This machine serves an image over its real peer port to a receiver (the test); the
    fetching side's bytes (image.fetch) need a second engine: the cluster rig's."""
    import hashlib

    import requests

    from faden_agent import protocol

    port = free_port()
    agent, node = agent_on_backend(advertise_host="127.0.0.1", peer_port=port)
    image = docker_client.images.get("faden-test/busybox:1").id
    token = "metrics-test-ticket-" + "x" * 20
    spec = {
        "image_id": image,
        "receiver": "127.0.0.1",
        "ttl_s": 60,
        "ticket_sha256": hashlib.sha256(token.encode()).hexdigest(),
    }
    done = backend.wait_command(backend.send_command(node["node_id"], "image.serve", spec), timeout_s=30)
    assert done["state"] == protocol.SUCCEEDED, done
    assert value_of(agent, "faden_agent_peer_served_bytes_total") == 0
    with requests.post(
        f"http://127.0.0.1:{port}{protocol.PEER_FETCH_PATH}",
        json={"image_id": image, "held_chains": []},
        headers={"Authorization": "Bearer " + token},
        stream=True,
        timeout=60,
    ) as response:
        assert response.status_code == 200
        received = sum(len(chunk) for chunk in response.iter_content(65536))
    scrape = wait_for(
        lambda: (s := get(agent)).value("faden_agent_peer_served_bytes_total") and s,
        15,
        what="served bytes in the metrics",
    )
    print(f"served {scrape.value('faden_agent_peer_served_bytes_total'):.0f} bytes; the receiver read {received}")
    assert scrape.value("faden_agent_peer_served_bytes_total") >= received * 0.9
    assert scrape.value("faden_agent_peer_transfers_total", direction="served", outcome="ok") == 1
    assert scrape.value("faden_agent_commands_ended_total", kind="image.serve", state="succeeded", reason="ok") == 1
