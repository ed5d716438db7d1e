"""The node conditions' parts: the tracker (events on a change of `active` only, none repeated
after a restart, events waiting while the outbox refuses them), its store (bounded, a corrupt
file moved aside), and each rule at its edges (conditions/rules.py)."""

from __future__ import annotations

import os
from types import SimpleNamespace

import orjson
import pytest

from faden_agent.config import load_config
from faden_agent.protocol import conditions as names
from faden_agent.workers.inventory.collector import Collector
from faden_agent.workers.inventory.conditions import evaluate, rules
from faden_agent.workers.inventory.conditions.clock import STA_UNSYNC, ClockStatus, read_clock
from faden_agent.workers.inventory.conditions.store import FILE, ConditionStore
from faden_agent.workers.inventory.conditions.tracker import MAX_PENDING, NodeConditions, Signal
from faden_agent.workers.inventory.disks import is_read_only
from faden_agent.workers.inventory.worker import InventoryReporter


def tracker(tmp_path) -> NodeConditions:
    return NodeConditions(ConditionStore(tmp_path))


def test_a_change_of_active_is_one_event_and_a_restart_repeats_none(tmp_path):
    conditions = tracker(tmp_path)
    assert conditions.update({names.CLOCK_UNSYNCHRONISED: Signal(False)}, 100.0) == []  # first seen ok: no event
    (raised,) = conditions.update({names.CLOCK_UNSYNCHRONISED: Signal(True, "not synchronised")}, 160.0)
    assert raised == {
        "type": names.CONDITION_CHANGED,
        "condition": names.CLOCK_UNSYNCHRONISED,
        "active": True,
        "old": False,
        "reason": "not synchronised",
        "since": 160.0,
    }
    assert names.event_record_id(raised) == "ev:cond:clock_unsynchronised:160000"
    # the reason changes while it holds: the section says so, no second event
    assert conditions.update({names.CLOCK_UNSYNCHRONISED: Signal(True, "still not")}, 220.0) == []
    assert conditions.section()[names.CLOCK_UNSYNCHRONISED] == {"active": True, "reason": "still not", "since": 160.0}

    again = tracker(tmp_path)  # a restart of the worker: the state comes back from the file
    assert again.update({names.CLOCK_UNSYNCHRONISED: Signal(True, "still not")}, 280.0) == []
    (cleared,) = again.update({names.CLOCK_UNSYNCHRONISED: Signal(False, "ignored while inactive")}, 340.0)
    assert (cleared["active"], cleared["old"], cleared["reason"], cleared["since"]) == (False, True, None, 340.0)
    assert again.active() == {}


def test_unknown_is_a_state_and_a_condition_first_seen_active_is_an_event(tmp_path):
    conditions = tracker(tmp_path)
    (first,) = conditions.update({names.FILESYSTEM_READ_ONLY: Signal(True, "read-only: /x")}, 1.0)
    assert first["old"] is None and first["active"] is True
    (unknown,) = conditions.update({names.FILESYSTEM_READ_ONLY: Signal(None, "cannot tell")}, 2.0)
    assert (unknown["active"], unknown["old"], unknown["reason"]) == (None, True, "cannot tell")
    assert conditions.section()[names.FILESYSTEM_READ_ONLY]["active"] is None
    assert conditions.active() == {}
    conditions.update({}, 3.0)  # no rule reports it any more (the GPUs went away, say): not held
    assert conditions.section() == {}


def test_events_wait_in_order_while_the_outbox_refuses_them(tmp_path):
    conditions = tracker(tmp_path)
    for n, active in enumerate([True, False, True]):
        conditions.update({names.CLOCK_UNSYNCHRONISED: Signal(active, "x")}, float(n))
    taken = []

    def refusing(event):
        raise OSError(30, "Read-only file system")

    with pytest.raises(OSError):
        conditions.deliver(refusing)
    assert len(conditions.pending) == 3
    assert conditions.deliver(taken.append) == 3
    assert [e["active"] for e in taken] == [True, False, True] and not conditions.pending
    for n in range(MAX_PENDING + 5):  # a state directory read-only for days: bounded, the oldest go
        conditions.update({names.CLOCK_UNSYNCHRONISED: Signal(n % 2 == 1, "x")}, 10.0 + n)
    assert len(conditions.pending) == MAX_PENDING and conditions.dropped == 5


def test_a_corrupt_store_is_moved_aside_and_reported(tmp_path):
    (tmp_path / FILE).write_bytes(b'{"version": 1, "states": {"x": {"active": "yes", "since": 1}}, "memory": {}}')
    store = ConditionStore(tmp_path)
    assert store.quarantined is not None and store.quarantined["file"] == "node conditions"
    assert "active or reason of the wrong type" in store.quarantined["error"]
    assert store.states == {} and not (tmp_path / FILE).exists()
    assert list(tmp_path.glob(f"{FILE}.corrupt-*"))
    (tmp_path / FILE).write_bytes(b"[]" + b" " * (300 * 1024))  # too big: never read whole
    assert ConditionStore(tmp_path).quarantined["error"].startswith("over ")


def test_a_read_only_store_never_writes(tmp_path):
    store = ConditionStore(tmp_path, read_only=True)
    NodeConditions(store).update({names.CLOCK_UNSYNCHRONISED: Signal(True, "x")}, 1.0)
    assert not (tmp_path / FILE).exists()


def disk(paths, roles, read_only, mountpoint="/m"):
    return {"paths": paths, "roles": roles, "mountpoint": mountpoint, "read_only": read_only}


def test_state_and_docker_read_only_at_once_a_configured_path_once_seen_writable():
    memory: dict = {}
    models = disk(["/models"], ["configured"], True, "/models")
    assert rules.filesystem_read_only([models], memory) == Signal(False)  # a share meant read-only
    state = disk(["/", "/var/lib/faden-agent"], ["root", "state"], True, "/")
    signal = rules.filesystem_read_only([state, models], memory)
    assert signal.active and signal.reason == "read-only: /var/lib/faden-agent (state) on /"
    data = disk(["/data"], ["configured"], False, "/data")
    assert rules.filesystem_read_only([data], memory) == Signal(False)
    data["read_only"] = True  # remounted read-only
    assert rules.filesystem_read_only([data], memory).reason == "read-only: /data (configured) on /data"
    root_only = disk(["/"], ["root"], True, "/")  # root alone: not a file system the agent writes
    assert (
        rules.filesystem_read_only([root_only, {"paths": ["/gone"], "error": "No such file"}], memory).active is False
    )
    assert rules.filesystem_read_only(None, memory).active is None


def test_read_only_is_the_mounts_flag_or_its_options_emergency_ro_included(tmp_path):
    assert is_read_only(str(tmp_path), SimpleNamespace(opts="rw,relatime")) is False
    assert is_read_only(str(tmp_path), SimpleNamespace(opts="ro,relatime")) is True
    assert is_read_only(str(tmp_path), SimpleNamespace(opts="rw,relatime,errors=remount-ro,emergency_ro")) is True
    assert is_read_only(str(tmp_path), None) is False
    assert is_read_only("/proc/sys", None) is (bool(os.statvfs("/proc/sys").f_flag & os.ST_RDONLY))


def port(device="mlx5_0", state="ACTIVE", phys="LinkUp", rate="400 Gb/sec (4X NDR)", layer="InfiniBand", **counters):
    return {
        "device": device,
        "port": "1",
        "link_layer": layer,
        "state": state,
        "phys_state": phys,
        "rate": rate,
        "counters": {"link_downed": 0, "symbol_errors": 0, "rx_errors": 0, **counters},
    }


def test_ib_limits_follow_gpuds_table_on_an_eight_gpu_machine_only():
    h100 = {"devices": [{"name": "NVIDIA H100 80GB HBM3"}] * 8}
    assert rules.ib_limits(None, None, h100, 600) == rules.IbLimits(8, 400.0, 600)
    assert rules.ib_limits(None, None, {"devices": [{"name": "NVIDIA A100-SXM4-80GB"}] * 8}, 1).min_ports == 1
    assert rules.ib_limits(None, None, {"devices": [{"name": "NVIDIA GB200"}] * 8}, 1).min_rate_gbps == 400.0
    two = {"devices": [{"name": "NVIDIA H100 PCIe"}] * 2}  # not the DGX/HGX class gpud's table describes
    assert rules.ib_limits(None, None, two, 1) == rules.IbLimits(0, 0.0, 1)
    assert rules.ib_limits(2, 100.0, h100, 1) == rules.IbLimits(2, 100.0, 1)  # the settings win
    assert rules.ib_limits(None, None, None, 1) == rules.IbLimits(0, 0.0, 1)


def test_a_port_seen_up_that_goes_down_and_too_few_active_ports():
    limits, memory = rules.IbLimits(2, 400.0, 600.0), {}
    ports = [port("mlx5_0"), port("mlx5_1", state="DOWN", phys="Polling")]  # mlx5_1 never up: only the count
    found = rules.infiniband(ports, limits, memory, 0.0)
    assert found[names.INFINIBAND_PORT_DOWN] == Signal(True, "1 InfiniBand ports active, 2 expected")
    ports[1] = port("mlx5_1")
    assert rules.infiniband(ports, limits, memory, 60.0)[names.INFINIBAND_PORT_DOWN] == Signal(False)
    ports[0] = port("mlx5_0", state="DOWN", phys="Disabled")
    found = rules.infiniband(ports, rules.IbLimits(0, 0.0, 600.0), memory, 120.0)
    assert found[names.INFINIBAND_PORT_DOWN] == Signal(True, "mlx5_0 port 1 down (Disabled)")
    ports[0] = port("mlx5_0", state="ACTIVE", phys="Polling")  # the logical state alone is not up
    assert rules.infiniband(ports, limits, memory, 130.0)[names.INFINIBAND_PORT_DOWN].active


def test_an_active_port_below_the_rate_and_roce_ports_out_of_the_ib_count():
    limits = rules.IbLimits(1, 400.0, 600.0)
    ports = [port("mlx5_0", rate="200 Gb/sec (4X HDR)"), port("mlx5_1", layer="Ethernet", rate="100 Gb/sec (2X HDR)")]
    found = rules.infiniband(ports, limits, {}, 0.0)
    assert found[names.INFINIBAND_RATE_LOW] == Signal(True, "mlx5_0 port 1 at 200 Gb/s, below 400 Gb/s")
    assert found[names.INFINIBAND_PORT_DOWN] == Signal(False)
    assert rules.rate_gbps("junk") is None and rules.rate_gbps("2.5 Gb/sec (1X SDR)") == 2.5


def test_a_counter_that_rose_holds_for_the_rising_time_and_a_reset_is_a_new_baseline():
    limits, memory = rules.IbLimits(0, 0.0, 600.0), {}
    rising = names.INFINIBAND_ERRORS_RISING
    assert rules.infiniband([port(link_downed=3)], limits, memory, 0.0)[rising] == Signal(False)  # the baseline
    found = rules.infiniband([port(link_downed=4, symbol_errors=9)], limits, memory, 60.0)[rising]
    assert found == Signal(True, "rose: mlx5_0 port 1: link_downed; mlx5_0 port 1: symbol_errors")
    assert rules.infiniband([port(link_downed=4, symbol_errors=9)], limits, memory, 600.0)[rising].active
    assert rules.infiniband([port(link_downed=4, symbol_errors=9)], limits, memory, 661.0)[rising] == Signal(False)
    assert rules.infiniband([port(link_downed=0)], limits, memory, 700.0)[rising] == Signal(False)  # reset
    memory = orjson.loads(orjson.dumps(memory))  # kept across a restart as JSON
    assert rules.infiniband([port(link_downed=1)], limits, memory, 760.0)[rising].active


def test_data_nics_listed_must_be_up_the_rdma_interfaces_once_seen_up():
    memory: dict = {}
    assert rules.network_links({"ibp0": "down"}, False, memory) is None  # never up: nothing to watch
    assert rules.network_links({"ibp0": "up", "ibp1": "down"}, False, memory) == Signal(False)
    assert rules.network_links({"ibp0": "lowerlayerdown", "ibp1": "down"}, False, memory) == Signal(
        True, "link not up: ibp0 lowerlayerdown"
    )
    assert rules.network_links({"eth9": "missing"}, True, {}) == Signal(True, "link not up: eth9 missing")


def test_the_clock_by_timedatectls_rule(tmp_path):
    assert rules.clock(ClockStatus(0, 15_999_999), 16.0) == Signal(False)
    assert rules.clock(ClockStatus(STA_UNSYNC, 4_000), 16.0) == Signal(False)  # the flag alone: kept off the RTC
    unsynced = rules.clock(ClockStatus(STA_UNSYNC, 16_000_000), 16.0)
    assert unsynced.active and unsynced.reason.endswith("16 s or more; STA_UNSYNC set")
    assert rules.clock("adjtimex: Operation not permitted", 16.0).active is None
    status = tmp_path / "timex"
    status.write_text("         mode: 0\n     maxerror: 16000000\n       status: 64\n")  # adjtimex --print
    assert read_clock(status) == ClockStatus(64, 16_000_000)
    status.write_text("status: sixty-four\n")
    with pytest.raises(ValueError, match="no whole-number"):
        read_clock(status)
    kernel = read_clock()  # this machine's own, through adjtimex(2)
    assert kernel.maxerror_us >= 0


def test_the_persistence_daemon_where_a_gpu_has_persistence_off():
    off = {
        "devices": [
            {"index": 0, "health": {"persistence_mode": True}},
            {"index": 1, "health": {"persistence_mode": False}},
        ]
    }
    calls = []

    def running(answer):
        return lambda: calls.append(answer) or answer

    assert rules.persistence_daemon(None, running(False)) is None
    assert rules.persistence_daemon(
        {"devices": [{"index": 0, "health": {"persistence_mode": True}}]}, running(False)
    ) == Signal(False)
    assert calls == []  # not needed: /proc is not scanned
    assert rules.persistence_daemon(off, running(True)) == Signal(False)
    assert rules.persistence_daemon(off, running(False)) == Signal(
        True, "nvidia-persistenced is not running and persistence mode is off on GPU 1"
    )


def test_a_stale_port_sample_makes_the_ib_conditions_unknown(tmp_path):
    config = load_config(
        {}, state_path=tmp_path / "state.json", runtime_dir=tmp_path / "run", traffic_interval_sec=10.0
    )
    conditions = NodeConditions(ConditionStore(tmp_path))
    sample = {"collected_at": 1000.0, "infiniband": [port()]}
    fresh = evaluate.signals(config, {"disks": []}, sample, conditions, now=1020.0)
    assert fresh[names.INFINIBAND_PORT_DOWN] == Signal(False)
    stale = evaluate.signals(config, {"disks": []}, sample, conditions, now=1031.0)
    assert stale[names.INFINIBAND_PORT_DOWN].active is None
    assert "stuck" in stale[names.INFINIBAND_ERRORS_RISING].reason
    assert names.INFINIBAND_PORT_DOWN not in evaluate.signals(
        config, {}, {"collected_at": 1.0, "infiniband": None}, conditions, now=2.0
    )


class RefusingReports:
    """The outbox's interface; refuses events while `refuse` (a read-only state directory)."""

    def __init__(self):
        self.refuse = False
        self.records: list[tuple[str, dict]] = []

    def put(self, kind, data, record_id=None):
        if self.refuse and kind == "event":
            raise OSError(30, "Read-only file system")
        self.records.append((kind, data))

    def put_latest(self, kind, data):
        self.records.append((kind, data))


def test_an_event_the_outbox_refuses_waits_and_the_record_still_goes(tmp_path):
    clock_file = tmp_path / "timex"
    clock_file.write_text("status: 0\nmaxerror: 1000\n")
    config = load_config(
        {}, state_path=tmp_path / "state" / "state.json", runtime_dir=tmp_path / "run", clock_status_file=clock_file
    )
    collector = Collector(config)
    collector.probes = [p for p in collector.probes if p.name in ("host", "disks")]
    reports = RefusingReports()
    conditions = NodeConditions(ConditionStore(config.state_dir))
    reporter = InventoryReporter(collector, reports, conditions=conditions)  # type: ignore[arg-type]
    assert reporter.report()["conditions"][names.CLOCK_UNSYNCHRONISED]["active"] is False

    clock_file.write_text("status: 64\nmaxerror: 16000000\n")
    reports.refuse = True
    record = reporter.report()
    assert record is not None and ("inventory", record) in reports.records  # the record went
    assert [e["condition"] for e in conditions.pending] == [names.CLOCK_UNSYNCHRONISED]
    assert not [r for r in reports.records if r[0] == "event"]

    reports.refuse = False
    reporter.report()
    (event,) = [data for kind, data in reports.records if kind == "event"]
    assert (event["condition"], event["active"], event["old"]) == (names.CLOCK_UNSYNCHRONISED, True, False)
    assert not conditions.pending
