"""Active probes between machines, in the cluster rig with real agents, engines
and the reference backend: traffic.probe's throughput under `tc tbf rate 200mbit`, its RTT
behind a 20 ms delay on one link (that pair only), a peer that is down (its entry has a
reason, the others are measured), byte and time bounds, and the admin view's probe round
(`faden-agent admin traffic CLUSTER --probe`) naming a machine whose agent cannot probe."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time

import pytest

from faden_agent import protocol
from faden_agent.devbackend.fanout import mint_ticket
from tests.cluster.conftest import require_rig
from tests.cluster.rig import Machine, Rig
from tests.support.oldagent import old_agent_tree  # noqa: F401 - a fixture

pytestmark = [pytest.mark.cluster, pytest.mark.docker]

CLUSTER = "probe-test"
PEER_PORT = 7480
MiB = 1 << 20


@pytest.fixture(scope="module")
def rig(old_agent_tree):  # the fixture imported above
    require_rig()
    old = ([sys.executable, "-P", "-m", "faden_agent", "run"], {"PYTHONPATH": str(old_agent_tree)})
    rig = Rig(4, agent_argv={4: old})
    try:
        rig.start()
        rig.backend.admin.set_cluster(CLUSTER, [m.node_id for m in rig.machines])
        yield rig
    finally:
        rig.stop()


def address(machine: Machine) -> str:
    return f"http://{machine.address}:{PEER_PORT}"


def probe(rig: Rig, prober: Machine, targets: list[Machine], timeout_s: float = 120, **bounds) -> dict:
    """What a backend does: each target gets traffic.serve with a fresh ticket's sha256 for
    the prober, the prober traffic.probe with the tickets. The finished command."""
    peers = []
    for target in targets:
        ticket, ticket_sha256 = mint_ticket()
        serve = rig.backend.send_command(
            target.node_id, "traffic.serve", {"tickets": [{"ticket_sha256": ticket_sha256, "receiver": prober.address}]}
        )
        assert rig.backend.wait_command(serve)["state"] == protocol.SUCCEEDED
        peers.append({"machine": target.node_id, "address": address(target), "ticket": ticket})
    command = rig.backend.send_command(prober.node_id, "traffic.probe", {"peers": peers, **bounds})
    return rig.backend.wait_command(command, timeout_s=timeout_s)


def result(command: dict) -> dict:
    assert command["state"] == protocol.SUCCEEDED, command["timeline"][-1]
    return command["timeline"][-1]["result"]


def entry(outcome: dict, machine: Machine) -> dict:
    return next(p for p in outcome["peers"] if p["machine"] == machine.node_id)


def test_throughput_under_tbf_200mbit(rig):
    m1, m2 = rig.machine(1), rig.machine(2)
    rig.shape(1, rate_mbit=200)  # what machine 1 sends
    try:
        measured = entry(result(probe(rig, m1, [m2], duration_s=4, max_bytes=1 << 30)), m2)
    finally:
        rig.unshape(1)
    print(measured)
    sent_mbit, received_mbit = measured["send_bytes_per_s"] * 8 / 1e6, measured["receive_bytes_per_s"] * 8 / 1e6
    print(
        f"probe m1 -> m2 under tbf 200mbit: {sent_mbit:.1f} Mbit/s ({measured['send_bytes']} bytes in "
        f"{measured['send_s']} s); m2 -> m1 unshaped: {received_mbit:.1f} Mbit/s"
    )
    assert measured["reason"] is None
    assert abs(sent_mbit - 200) <= 0.1 * 200
    assert measured["send_bytes"] < 1 << 30  # the time bound ended it
    assert received_mbit > 200 * 1.1  # the other direction is not shaped


def test_rtt_behind_a_20ms_delay_on_one_link_only(rig):
    m1, m2, m3 = rig.machine(1), rig.machine(2), rig.machine(3)
    rig.shape(1, delay_ms=20, to=m2.address)  # what machine 1 sends to machine 2 waits 20 ms
    try:
        # max_bytes small: the delay line is for RTT, not for throughput
        outcome = result(probe(rig, m1, [m2, m3], duration_s=5, round_trips=100, max_bytes=MiB))
    finally:
        rig.unshape(1)
    far, near = entry(outcome, m2), entry(outcome, m3)
    print(
        f"RTT m1 -> m2 p50 {far['rtt_p50_ms']} ms p99 {far['rtt_p99_ms']} ms (min {far['rtt_min_ms']}, "
        f"{far['round_trips']} round trips); m1 -> m3 p50 {near['rtt_p50_ms']} ms p99 {near['rtt_p99_ms']} ms"
    )
    assert far["reason"] is None and near["reason"] is None
    assert far["round_trips"] == 100
    assert 17 <= far["rtt_p50_ms"] <= 23
    assert far["rtt_p99_ms"] >= far["rtt_p50_ms"]
    assert near["rtt_p50_ms"] < 3  # that pair only


def test_a_peer_that_is_down_has_a_reason_and_the_others_are_measured(rig):
    m1, m2, m3 = rig.machine(1), rig.machine(2), rig.machine(3)
    # Machine 3's tickets are registered while it is up; then its link goes down.
    peers = []
    for target in (m3, m2):
        ticket, ticket_sha256 = mint_ticket()
        serve = rig.backend.send_command(
            target.node_id, "traffic.serve", {"tickets": [{"ticket_sha256": ticket_sha256, "receiver": m1.address}]}
        )
        assert rig.backend.wait_command(serve)["state"] == protocol.SUCCEEDED
        peers.append({"machine": target.node_id, "address": address(target), "ticket": ticket})
    peers.append({"machine": "node-nobody", "address": "http://198.18.0.99:7480", "ticket": "n" * 32})
    peers.append({"machine": m2.node_id + "-bad", "address": address(m2), "ticket": "w" * 32})  # a wrong ticket
    rig.link(3, up=False)
    try:
        command = rig.backend.send_command(m1.node_id, "traffic.probe", {"peers": peers, "duration_s": 1})
        outcome = result(rig.backend.wait_command(command, timeout_s=120))
    finally:
        rig.link(3, up=True)
    by_machine = {p["machine"]: p for p in outcome["peers"]}
    print(outcome["peers"])
    assert by_machine[m3.node_id]["reason"] == "peer_unreachable" and by_machine[m3.node_id]["message"]
    assert by_machine["node-nobody"]["reason"] == "peer_unreachable"
    assert by_machine[m2.node_id + "-bad"]["reason"] == "ticket_refused"
    measured = by_machine[m2.node_id]
    assert measured["reason"] is None and measured["rtt_p50_ms"] > 0 and measured["send_bytes_per_s"] > 0
    assert "3 failed" in rig.backend.command(command)["timeline"][-1]["message"]


def test_bytes_and_time_bounds(rig):
    m1, m2 = rig.machine(1), rig.machine(2)
    started = time.monotonic()
    small = entry(result(probe(rig, m1, [m2], duration_s=20, max_bytes=MiB, round_trips=10)), m2)
    print(small, f"{time.monotonic() - started:.1f} s with the serve command")
    assert small["send_bytes"] == small["receive_bytes"] == MiB  # max_bytes ended it early
    assert small["send_s"] < 5 and small["receive_s"] < 5 and small["round_trips"] == 10
    rig.shape(1, rate_mbit=50)
    try:
        timed = entry(result(probe(rig, m1, [m2], duration_s=1, max_bytes=1 << 30)), m2)
    finally:
        rig.unshape(1)
    print(timed)
    # 1 s at 50 Mbit/s is about 6 MB: the time bound ended the upload long before 1 GiB
    assert timed["send_bytes"] < 20 * MiB and timed["send_s"] < 1 + 2


def test_admin_probe_round_fills_the_matrix_and_names_the_old_agent(rig):
    env = {**os.environ, "FADEN_NODE_AGENT_BACKEND_URL": rig.backend.url, "FADEN_ADMIN_TOKEN": rig.backend.admin_token}
    rig.shape(2, delay_ms=20, to=rig.machine(3).address)
    try:
        shown = subprocess.run(
            [sys.executable, "-m", "faden_agent", "admin", "traffic", CLUSTER, "--probe", "--duration", "1"],
            env=env,
            capture_output=True,
            text=True,
            timeout=300,
        )
    finally:
        rig.unshape(2)
    print(shown.stdout)
    assert shown.returncode == 0, shown.stderr
    lines = shown.stdout.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("probes (latest"))
    names = re.split(r"\s{2,}", lines[start + 1].strip())[1:]
    table = {}
    for line in lines[start + 2 : start + 2 + len(names)]:
        row, *cells = re.split(r"\s{2,}", line.strip())
        table[row] = dict(zip(names, cells, strict=True))
    for row in ("rig-m1", "rig-m2", "rig-m3"):
        for column in ("rig-m1", "rig-m2", "rig-m3"):
            assert row == column or "Mbit/s" in table[row][column], (row, column, table[row][column])
        assert table[row]["rig-m4"] == "(not probed)"  # the old agent
    rtt_p50 = {
        (r, c): float(table[r][c].split()[1].split("/")[0])
        for r in table
        for c in table
        if r != c and "Mbit" in table[r][c]
    }
    print(rtt_p50)
    # the delayed pair stands out (its accuracy is test_rtt_behind_a_20ms_delay_on_one_link_only's)
    assert rtt_p50[("rig-m2", "rig-m3")] >= 17 and rtt_p50[("rig-m3", "rig-m2")] >= 17
    assert rtt_p50[("rig-m1", "rig-m2")] < 5 and rtt_p50[("rig-m1", "rig-m3")] < 5
    assert f"agent lacks {protocol.PROBE_CAPABILITY}" in shown.stdout and "rig-m4" in shown.stdout
    matrix = rig.backend.admin.traffic(CLUSTER)
    pairs = {(p["from"], p["to"]) for p in matrix["probes"]}
    new = [m.node_id for m in rig.machines[:3]]
    # every pair of the three new machines was probed once, in one direction or the other
    for i, a in enumerate(new):
        for b in new[i + 1 :]:
            assert (a, b) in pairs or (b, a) in pairs
