"""Traffic between machines, in the cluster rig with real agents, engines and
the reference backend: known TCP traffic is reported per peer within 2 %, a delay on one
link shows in that pair's RTT only, a fake InfiniBand tree gives counters x4, rates and
the NCCL fall-back warning, and an old agent (the base commit's build) is named by the
admin view."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from faden_agent import protocol
from tests.cluster.conftest import require_rig
from tests.cluster.rig import Rig
from tests.support.agentproc import wait_for
from tests.support.oldagent import old_agent_tree  # noqa: F401 - a fixture

pytestmark = [pytest.mark.cluster, pytest.mark.docker]

CLUSTER = "traffic-test"
REPO = Path(__file__).resolve().parents[2]
MiB = 1 << 20


def sysfs_of(machine) -> Path:
    return machine.root / "sysfs"


@pytest.fixture(scope="module")
def rig(old_agent_tree):
    require_rig()
    old = ([sys.executable, "-P", "-m", "faden_agent", "run"], {"PYTHONPATH": str(old_agent_tree)})
    rig = Rig(4, agent_settings={"traffic_interval_sec": 1, "sysfs_root": sysfs_of}, agent_argv={4: old})
    try:
        rig.start()
        for machine in rig.machines:
            sysfs_of(machine).mkdir(exist_ok=True)
        rig.backend.admin.set_cluster(CLUSTER, [m.node_id for m in rig.machines])
        yield rig
    finally:
        rig.stop()


def records(rig: Rig) -> dict[int, dict | None]:
    """Machine index -> its latest traffic record data (None before the first)."""
    by_node = {m["node_id"]: m["traffic"] for m in rig.backend.admin.traffic(CLUSTER)["machines"]}
    return {m.index: by_node.get(m.node_id) for m in rig.machines}


def peer(record: dict, address: str) -> dict:
    return next(p for p in record["peers"] if p["address"] == address)


def wait_peers_known(rig: Rig, indexes=(1, 2, 3)) -> dict[int, dict]:
    others = {m.index: {o.address for o in rig.machines if o is not m} for m in rig.machines}

    def known() -> dict | None:
        latest = records(rig)
        ok = all(latest[i] and {p["address"] for p in latest[i]["peers"]} == others[i] for i in indexes)
        return latest if ok else None

    return wait_for(known, 30, interval_s=0.5, what="traffic records naming every peer")


def load(machine, *args: str) -> subprocess.Popen:
    proc = machine.popen(
        sys.executable,
        "-m",
        "tests.cluster.traffic_load",
        *args,
        stdout=subprocess.PIPE,
        cwd=REPO,
        env={**os.environ, "PYTHONPATH": str(REPO)},
    )
    return proc


def started(proc: subprocess.Popen) -> subprocess.Popen:
    assert proc.stdout.readline().strip() == b"ready"
    return proc


def settled(rig: Rig, index: int, address: str, since: float) -> dict | None:
    """machine's record for the peer once sampled after `since` with both rates back at 0."""
    record = records(rig)[index]
    if record is None or record["collected_at"] < since:
        return None
    entry = peer(record, address)
    return entry if entry["sent_bytes_per_s"] == 0 and entry["received_bytes_per_s"] == 0 else None


def test_bytes_per_peer_both_directions_long_and_short_connections(rig):
    m1, m2, m3 = rig.machine(1), rig.machine(2), rig.machine(3)
    before = wait_peers_known(rig)
    base12, base21 = peer(before[1], m2.address), peer(before[2], m1.address)
    base13 = peer(before[1], m3.address)
    # One long connection m1 -> m2 (100 MiB there, 40 MiB back) and 300 short ones m2 -> m1
    # (64 KiB there, 16 KiB back), each of those opened and closed between two samples.
    long_server = started(load(m2, "serve", "7100", "1", str(100 * MiB), str(40 * MiB)))
    short_server = started(load(m1, "serve", "7101", "300", str(64 * 1024), str(16 * 1024)))
    shorts = load(m2, "send", m1.address, "7101", "300", str(64 * 1024), str(16 * 1024))
    load(m1, "send", m2.address, "7100", "1", str(100 * MiB), str(40 * MiB)).wait(120)
    assert shorts.wait(120) == 0 and long_server.wait(30) == 0 and short_server.wait(30) == 0
    done = time.time()
    sent_1_to_2 = 100 * MiB + 300 * 16 * 1024
    sent_2_to_1 = 40 * MiB + 300 * 64 * 1024
    after12 = wait_for(lambda: settled(rig, 1, m2.address, done), 30, interval_s=0.5, what="m1's record to settle")
    after21 = wait_for(lambda: settled(rig, 2, m1.address, done), 30, interval_s=0.5, what="m2's record to settle")
    measured = {
        "m1 sent to m2": (after12["sent_bytes"] - base12["sent_bytes"], sent_1_to_2),
        "m1 received from m2": (after12["received_bytes"] - base12["received_bytes"], sent_2_to_1),
        "m2 sent to m1": (after21["sent_bytes"] - base21["sent_bytes"], sent_2_to_1),
        "m2 received from m1": (after21["received_bytes"] - base21["received_bytes"], sent_1_to_2),
    }
    print({k: f"{got} / {want} ({(got - want) / want:+.4%})" for k, (got, want) in measured.items()})
    for what, (got, want) in measured.items():
        assert abs(got - want) <= 0.02 * want, f"{what}: {got} bytes reported, {want} sent"
    # attributed to the right peer: nothing of it landed on machine 3
    after13 = peer(records(rig)[1], m3.address)
    assert after13["sent_bytes"] - base13["sent_bytes"] < 64 * 1024
    assert after12["interface"] == "eth0" and after21["interface"] == "eth0"


def test_delay_on_one_link_shows_in_that_pair_only(rig):
    m1, m2, m3 = rig.machine(1), rig.machine(2), rig.machine(3)
    wait_peers_known(rig)
    echoes = [started(load(m, "echo", "7200")) for m in (m2, m3)]
    rig.shape(1, delay_ms=20, to=m2.address)  # what machine 1 sends to machine 2 waits 20 ms
    pings: list = []
    try:
        # pinging until both records were read: a loaded machine may send them late
        pings += [started(load(m1, "pingpong", m.address, "7200", "120")) for m in (m2, m3)]
        start = time.time()

        def measured() -> dict | None:
            record = records(rig)[1]
            if record is None or record["collected_at"] < start:
                return None
            far, near = peer(record, m2.address), peer(record, m3.address)
            return record if far["connections"] and near["connections"] and far["rtt_ms"] else None

        try:
            record = wait_for(measured, 30, interval_s=0.5, what="m1's record with RTTs under load")
        except AssertionError:
            print(records(rig)[1])
            raise

        def measured_back() -> dict | None:
            # machine 2 sends its own record on its own schedule: wait for one of this load
            back = records(rig)[2]
            if back is None or back["collected_at"] < start:
                return None
            entry = peer(back, m1.address)
            return entry if entry["connections"] and entry["min_rtt_ms"] is not None else None

        reverse = wait_for(measured_back, 30, interval_s=0.5, what="m2's record with its RTT to m1")
        far, near = peer(record, m2.address), peer(record, m3.address)
        print(
            f"RTT m1->m2 {far['rtt_ms']} ms (min {far['min_rtt_ms']}), m2->m1 {reverse['rtt_ms']} ms, "
            f"m1->m3 {near['rtt_ms']} ms"
        )
        # The path's RTT is the kernel's windowed minimum: the smoothed one also holds the
        # peers' scheduling and delayed ACKs (the echo side's ACKs wait for the next ping).
        assert 17 <= far["min_rtt_ms"] <= 23
        # The echo side has few clean samples (the handshake, the first quick ACKs; later
        # ACKs wait for the next ping, 20 ms on): a loaded moment there shows (24.2 ms seen).
        assert reverse["min_rtt_ms"] is not None and 17 <= reverse["min_rtt_ms"] <= 30
        assert far["rtt_ms"] >= far["min_rtt_ms"]
        assert near["min_rtt_ms"] is not None and near["min_rtt_ms"] < 5 and near["rtt_ms"] < 17
        assert all(ping.poll() is None for ping in pings), "a pingpong ended early (its echo side broke)"
    finally:
        rig.unshape(1)
        for proc in (*pings, *echoes):
            proc.kill()
            proc.wait(10)


def write_port(root: Path, device: str, port: str, counters: dict[str, int] | None, state: str = "4: ACTIVE") -> Path:
    path = root / "class" / "infiniband" / device / "ports" / port
    (path / "counters").mkdir(parents=True, exist_ok=True)
    (path / "state").write_text(state + "\n")
    (path / "link_layer").write_text("InfiniBand\n")
    (path / "rate").write_text("200 Gb/sec (4X HDR)\n")
    for name, value in (counters or {}).items():
        (path / "counters" / name).write_text(f"{value}\n")
    return path


def test_infiniband_counters_rates_and_the_nccl_fallback_warning(rig):
    m1, m2 = rig.machine(1), rig.machine(2)
    wait_peers_known(rig)
    root = sysfs_of(m1)
    port = write_port(root, "mlx5_0", "1", {"port_xmit_data": 1000, "port_rcv_data": 0, "port_rcv_errors": 0})
    write_port(root, "mlx5_1", "1", None)  # a device whose driver exposes no counters
    stop = threading.Event()

    def rdma_traffic() -> None:  # 250,000 words = 1 MB each second
        words = 1000
        while not stop.wait(0.1):
            words += 25_000
            (port / "counters" / "port_xmit_data").write_text(f"{words}\n")

    writer = threading.Thread(target=rdma_traffic)
    writer.start()
    try:

        def moving() -> dict | None:
            record = records(rig)[1]
            ports = {p["device"]: p for p in (record or {}).get("infiniband") or []}
            busy = ports.get("mlx5_0", {})
            return (
                ports if busy.get("tx_bytes_per_s") and busy["counters"]["tx_bytes"] > 4 * 1000 + 4 * 50_000 else None
            )

        ports = wait_for(moving, 30, interval_s=0.5, what="a record with the RDMA port moving")
    finally:
        stop.set()
        writer.join()
    busy = ports["mlx5_0"]
    words = int((port / "counters" / "port_xmit_data").read_text())
    assert busy["counters"]["tx_bytes"] % 4 == 0 and busy["counters"]["tx_bytes"] <= 4 * words  # 4-byte units
    assert 0.6e6 <= busy["tx_bytes_per_s"] <= 1.4e6, busy  # 1 MB/s written; sampling jitter on a busy host
    assert busy["rx_bytes_per_s"] == 0 and busy["state"] == "ACTIVE" and busy["rate"].startswith("200 Gb/sec")
    assert ports["mlx5_1"]["counters"] is None and "not measured" in ports["mlx5_1"]["note"]

    # Heavy TCP to a peer (tc tbf: 200 Mbit/s) while the RDMA port stays flat: the warning, once.
    rig.shape(1, rate_mbit=200)
    try:
        server = started(load(m2, "serve", "7300", "1", str(200 * MiB), "0"))
        sender = load(m1, "send", m2.address, "7300", "1", str(200 * MiB), "0")
        start, rate = time.monotonic(), None
        while sender.poll() is None:  # the rate the record shows, once past the ramp
            time.sleep(0.3)
            if time.monotonic() - start > 3 and sender.poll() is None:
                rate = peer(records(rig)[1], m2.address)["sent_bytes_per_s"]
        assert sender.wait(120) == 0 and server.wait(30) == 0
    finally:
        rig.unshape(1)
    print(f"sent rate under tbf 200mbit: {rate} B/s")
    assert rate is not None and abs(rate - 25e6) <= 0.1 * 25e6  # payload at 200 Mbit/s, within 10 %
    kind = "traffic.rdma_idle_under_tcp_load"
    events = wait_for(
        lambda: [e for e in rig.backend.events(m1.node_id) if e["data"].get("type") == kind],
        20,
        interval_s=0.5,
        what="the NCCL fall-back warning",
    )
    assert len(events) == 1
    event = events[0]["data"]
    assert event["peers"][0]["address"] == m2.address and event["rdma_ports"] == ["mlx5_0/1"]
    assert event["tcp_bytes_per_s"] > 12.5e6 and event["rdma_bytes_per_s"] < 0.01 * event["tcp_bytes_per_s"]
    assert not [e for e in rig.backend.events(m2.node_id) if e["data"].get("type") == kind]  # m2 has no RDMA ports


def test_admin_view_names_the_old_agent_and_shows_the_matrix(rig):
    m1, m2, old = rig.machine(1), rig.machine(2), rig.machine(4)
    wait_peers_known(rig)
    assert protocol.TRAFFIC_CAPABILITY not in rig.backend.node_by_agent("rig-m4")["capabilities"]
    echo = started(load(m2, "echo", "7400"))
    # pinging on past the view: the record the view shows must still hold the connection
    since = time.time()
    ping = started(load(m1, "pingpong", m2.address, "7400", "120"))

    def pinging() -> bool:  # a record of the pingpong, not one left by the bulk send before it
        record = records(rig)[1]
        return bool(record and record["collected_at"] >= since and peer(record, m2.address)["rtt_ms"])

    try:
        wait_for(pinging, 20, interval_s=0.5, what="an RTT m1 -> m2 sampled while pinging")
        env = {
            **os.environ,
            "FADEN_NODE_AGENT_BACKEND_URL": rig.backend.url,
            "FADEN_ADMIN_TOKEN": rig.backend.admin_token,
        }
        shown = subprocess.run(
            [sys.executable, "-m", "faden_agent", "admin", "traffic", CLUSTER],
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert shown.returncode == 0, shown.stderr
        print(shown.stdout)
        lines = shown.stdout.splitlines()
        assert f"agent lacks {protocol.TRAFFIC_CAPABILITY} (update it): rig-m4 ({old.node_id}" in shown.stdout
        row = next(line for line in lines if line.startswith("rig-m1 "))
        assert "eth0" in row and "ms" in row and "(old agent)" not in row
        old_row = next(line for line in lines if line.startswith("rig-m4 "))
        assert old_row.count("(old agent)") == 3
        assert ping.poll() is None, "the pingpong ended early (the echo side broke)"
    finally:
        for proc in (ping, echo):
            proc.kill()
            proc.wait(10)
    # the old agent ignored the peers message, and its traffic never reached the backend
    assert records(rig)[4] is None
    assert m1.address in [p["address"] for p in records(rig)[2]["peers"]]
