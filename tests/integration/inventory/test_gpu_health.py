"""GPU health in a real agent, through the real pynvml loading a C libnvidia-ml.so.1
(tests/nvml/fakenvml.c) whose state file each test rewrites: every rule of the verdict
table drives the record and a `gpu.health_changed` event; an Xid's event arrives within
2 s; a lost or vanished GPU fails alone; a hung NVML call is an overrun that holds no
heartbeat; a driver that is not loaded is a reason, not a crash."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import orjson
import pynvml
import pytest

from faden_agent import protocol
from faden_agent.workers.inventory.gpu import rules as gpu_rules
from faden_agent.workers.inventory.gpu.holds import read_boot_id
from faden_agent.workers.inventory.record import without_usage
from tests.nvml.state import GpuState
from tests.support.agentproc import AgentProcess, wait_for
from tests.support.backendproc import agent_env_for, backend  # noqa: F401 - the fixture
from tests.support.gpuagent import health_events, newest_gpu, records, start
from tests.support.journalfiles import JournalWriter
from tests.support.kernellog import kernel_line
from tests.support.metricsclient import get, promtool_check

pytestmark = pytest.mark.docker

# rule -> (how the GPU shows it, the reason the record and the event must name)
FAULTS = {
    "xid_fatal": (None, "Xid 79: GPU has fallen off the bus (reboot needed)"),
    "xid_degrading": (None, "Xid 94: contained ECC error (reset needed, when convenient)"),
    "remap_failure": (lambda g: g["remap"].update(failure=1), "row remapping failed"),
    "retired_limit": (lambda g: g["retired"].update(sbe=40, dbe=24), "64 retired pages: at the driver's limit"),
    "remap_none_left": (
        lambda g: g["remap_histogram"].update(none=2),
        "row remapping: 2 banks with no spare row left",
    ),
    "power_brake": (lambda g: g.update(clocks_event_reasons=0x80), "power brake slowdown active"),
    "uncorrected_aggregate": (
        lambda g: g["ecc"]["uncorrected"].update(aggregate=3),
        "3 uncorrected ECC errors on record",
    ),
    "ecc_off": (lambda g: g.update(ecc_mode=0), "ECC mode off"),
    "persistence_off": (lambda g: g.update(persistence=0), "persistence mode off"),
    "mig_pending": (lambda g: g.update(mig_pending=1), "MIG mode change pending: reset needed"),
    "recovery_reset": (lambda g: g.update(recovery_action=1), "driver asks for recovery: gpu_reset"),
    "fabric_failed": (lambda g: g["fabric"].update(status=999), "fabric registration failed: Unknown Error"),
    "remap_pending": (lambda g: g["remap"].update(pending=1), "row remap pending: reset needed"),
    "retired_pending": (lambda g: g["retired"].update(pending=1), "page retirement pending: reset needed"),
    "recovery_drain": (lambda g: g.update(recovery_action=3), "driver asks for recovery: drain_p2p"),
    "throttled": (lambda g: g.update(clocks_event_reasons=0x40), "hw_thermal_slowdown active over the throttle limit"),
    "uncorrected_ecc": (lambda g: g["ecc"]["uncorrected"].update(volatile=2), "uncorrected ECC errors rising"),
    "nvlink_errors": (lambda g: g["nvlink"]["1"].update(crc_data=7), "NVLink crc_data errors rising"),
    "nvlink_down": (lambda g: g["nvlink"]["0"].update(active=0), "NVLink 0 down"),
    "pcie_replays": (lambda g: g["pcie"].update(replay=9), "PCIe replays over 8 a minute"),
    "unanswering": (lambda g: g.update(fail_all=999), "NVML: Unknown Error on every call"),
    "temperature_shutdown": (lambda g: g.update(temperature=92), "GPU temperature 92 C: at or over its shutdown 92 C"),
    "temperature_slowdown": (
        lambda g: g.update(memory_temperature=95),
        "memory temperature 95 C: at or over its maximum 95 C",
    ),
    "pcie_width": (lambda g: g["pcie"].update(width=8), "PCIe link x8 of x16"),
    "fabric_pending": (lambda g: g["fabric"].update(state=2), "fabric not ready: in_progress"),
    "nvml_error": (lambda g: g.update(error={"nvmlDeviceGetMemoryInfo": 999}), "NVML error: Unknown Error"),
}
XIDS = {"xid_fatal": 79, "xid_degrading": 94}
VERDICT_OF = {rule.name: rule.verdict for rule in gpu_rules.RULES}


def test_every_rule_drives_its_verdict_and_event(tmp_path, agent_factory):
    # The table is the contract: every rule but those about a GPU NVML cannot read (lost,
    # missing, hung), of the whole fabric (sxid_fatal: the tests below) or of a check
    # (check_failed, check_warned: test_gpu_check.py) has a fault here, one GPU per rule.
    assert set(FAULTS) | {"lost", "missing", "hung", "sxid_fatal", "check_failed", "check_warned"} == set(VERDICT_OF)
    names = list(FAULTS)
    gpus = GpuState(tmp_path / "nvml", count=len(names))
    agent, state_dir, first = start(tmp_path, agent_factory, gpus, gpu_throttle_sec=1)
    assert first["available"] and first["health"] == {"verdict": "ok", "reasons": []}
    assert all(d["health"]["verdict"] == "ok" for d in first["devices"])
    healthy = first["devices"][0]["health"]
    assert healthy["nvlink"] == {  # the wire form: one list per field (wire_form.py)
        "links": 2,
        "active": [True, True],
        "link_errors": {"replay": [0, 0], "recovery": [0, 0], "crc_flit": [0, 0], "crc_data": [0, 0]},
        "errors": {"replay": 0, "recovery": 0, "crc_flit": 0, "crc_data": 0},
    }
    assert healthy["fabric"] == {"state": "completed", "status": None, "clique_id": 1, "cluster_uuid": None}
    assert healthy["remapped_rows"] == {"correctable": 0, "uncorrectable": 0, "pending": False, "failure": False}
    assert healthy["persistence_mode"] is True and healthy["recovery_action"] == "none"
    assert health_events(state_dir) == []

    for index, name in enumerate(names):
        change, _ = FAULTS[name]
        if change:
            change(gpus.gpus[index])
    gpus.write()
    for index, name in enumerate(names):
        if name in XIDS:
            gpus.xid(index, XIDS[name])

    def every_event():
        found = {e["index"]: e for e in health_events(state_dir)}
        return found if len(found) == len(names) else None

    events = wait_for(every_event, 30, what="a gpu.health_changed event for every rule")

    # the round's record follows its events (written after them: wait for the one of that round)
    def settled():
        gpu = newest_gpu(state_dir)
        verdicts = [d["health"]["verdict"] for d in gpu["devices"]]
        return verdicts == [VERDICT_OF[name] for name in names] and gpu

    gpu = wait_for(settled, 10, what="the record of every rule's round")
    for index, name in enumerate(names):
        reason, verdict = FAULTS[name][1], VERDICT_OF[name]
        device = gpu["devices"][index]
        assert device["health"]["verdict"] == verdict and device["health"]["reasons"] == [reason], name
        assert events[index] == {
            "type": "gpu.health_changed",
            "index": index,
            "uuid": device["uuid"],
            "pci_bus_id": device["pci_bus_id"],
            "old": "ok",
            "new": verdict,
            "reasons": [reason],
            "at": events[index]["at"],
        }, name
        assert f"GPU {index}: {reason}" in gpu["health"]["reasons"]
    assert gpu["health"]["verdict"] == "failed"
    xid = gpu["devices"][names.index("xid_fatal")]["health"]["xid"]
    assert [(x["event"], x["code"]) for x in xid] == [("xid", 79)]
    assert agent.workers()["inventory"]["restarts"] == 0


def test_quiet_gpus_resend_nothing(tmp_path, agent_factory):
    # Rounds every second; gauges move (corrected ECC, clock event time), counters do not:
    # the GPU part of the content hash stays the same and no event is written.
    gpus = GpuState(tmp_path / "nvml", count=2)
    _, state_dir, first = start(tmp_path, agent_factory, gpus, inventory_usage_sec=2)
    gpus.gpus[0]["ecc"]["corrected"]["volatile"] = 9  # a gauge
    gpus.gpus[1]["clocks_event_reasons"] = 0x4  # sw_power_cap: reported, no rule
    gpus.write()
    time.sleep(4)
    full = [r for r in records(state_dir, protocol.INVENTORY) if r["type"] == "full"]
    assert {orjson.dumps(without_usage(r["gpu"])) for r in full} == {orjson.dumps(without_usage(first))}
    assert health_events(state_dir) == []
    assert [d["health"]["verdict"] for d in full[-1]["gpu"]["devices"]] == ["ok", "ok"]
    # the gauges did move: the newest record carries them (a full one when another section
    # changed, e.g. docker0 under other tests' containers, else an unchanged one)
    newest = records(state_dir, protocol.INVENTORY)[-1]
    gauges = (newest if newest["type"] == "full" else newest["usage"])["gpu"]["devices"]
    assert gauges[0]["health"]["usage"]["ecc_corrected_volatile"] == 9
    assert "sw_power_cap" in gauges[1]["health"]["usage"]["clock_events_active_s"]


def test_an_xid_event_arrives_within_2_s(tmp_path, agent_factory):
    # No interval round for a minute: only the event thread can bring the Xid in.
    gpus = GpuState(tmp_path / "nvml", count=2)
    _, state_dir, first = start(tmp_path, agent_factory, gpus, inventory_interval_sec=60)
    gpus.xid(1, 79)
    written = time.monotonic()
    event = wait_for(lambda: health_events(state_dir), 2, interval_s=0.02, what="the Xid's event within 2 s")[0]
    print(f"Xid to gpu.health_changed in the outbox: {time.monotonic() - written:.2f} s")
    assert (event["index"], event["uuid"], event["old"], event["new"]) == (
        1,
        first["devices"][1]["uuid"],
        "ok",
        "failed",
    )
    assert event["pci_bus_id"] == "00000000:18:00.0"
    assert event["reasons"] == ["Xid 79: GPU has fallen off the bus (reboot needed)"]

    # another registered error type: in the GPU's history, and a record at once, no verdict
    gpus.event(0, pynvml.nvmlEventTypeDoubleBitEccError)

    def logged():
        gpu = newest_gpu(state_dir)
        return gpu["devices"][0]["health"]["xid"] and gpu

    gpu = wait_for(logged, 5, what="the double-bit ECC event in GPU 0's history")
    assert [(x["event"], x["code"]) for x in gpu["devices"][0]["health"]["xid"]] == [("double_bit_ecc", 0)]
    assert gpu["devices"][0]["health"]["verdict"] == "ok" and len(health_events(state_dir)) == 1


def test_a_lost_gpu_and_a_vanished_one_fail_alone(tmp_path, agent_factory):
    gpus = GpuState(tmp_path / "nvml", count=3)
    agent, state_dir, first = start(tmp_path, agent_factory, gpus, inventory_interval_sec=60)
    gpus.gpus[1]["lost"] = 1  # the event wait ends with GPU_IS_LOST, as NVML documents
    gpus.write()
    event = wait_for(lambda: health_events(state_dir), 15, what="the lost GPU's event")[0]
    # named from its last good read: uuid, bus id and the verdict it had
    assert event == {
        **event,
        "index": 1,
        "uuid": first["devices"][1]["uuid"],
        "pci_bus_id": first["devices"][1]["pci_bus_id"],
        "old": "ok",
        "new": "failed",
        "reasons": ["GPU is lost"],
    }
    # the other GPUs' events go on without it (no interval round for a minute): once the
    # event set is built again without the lost GPU (an Xid before that is NVML's to drop)
    wait_for(
        lambda: (
            agent.workers()["inventory"]["status"].get("gpu_events")
            == {
                "watching": [0, 2],
                "lost": [1],
                "unwatched": {"1": "GPU is lost"},
                "hung": None,
                "error": None,
                "let_go": False,
            }
        ),
        10,
        what="the event set without the lost GPU",
    )
    gpus.xid(0, 48)
    xid = wait_for(lambda: [e for e in health_events(state_dir) if e["index"] == 0], 5, what="GPU 0's Xid")[0]
    assert xid["reasons"] == ["Xid 48: double-bit ECC error (reset needed)"]
    gpu = newest_gpu(state_dir)
    lost = gpu["devices"][1]
    assert lost["state"] == "error" and lost["error"] == "GPU is lost" and lost["health"]["verdict"] == "failed"
    assert [d["state"] for d in gpu["devices"]] == ["ok", "error", "ok"]
    assert gpu["devices"][2]["usage"]["memory_free"] > 0  # the others still report

    gpus.gpus[1]["lost"] = 0  # back: an event says so
    gpus.write()
    back = wait_for(lambda: [e for e in health_events(state_dir) if e["index"] == 1][1:], 40, what="GPU 1 back")
    assert (back[0]["old"], back[0]["new"], back[0]["reasons"]) == ("failed", "ok", [])

    gpus.top["count"] = 2  # GPU 2 falls out of NVML's count
    gpus.write()
    events = wait_for(lambda: [e for e in health_events(state_dir) if e["index"] == 2], 70, what="the vanished GPU")
    assert events[0]["uuid"] == first["devices"][2]["uuid"] and events[0]["new"] == "failed"
    assert events[0]["reasons"][0].startswith("GPU missing since 20")
    gpu = wait_for(lambda: "missing" in newest_gpu(state_dir) and newest_gpu(state_dir), 5, what="the record")
    assert [m["uuid"] for m in gpu["missing"]] == [first["devices"][2]["uuid"]]
    assert f"GPU 2: {events[0]['reasons'][0]}" in gpu["health"]["reasons"]
    assert agent.workers()["inventory"]["restarts"] == 0


def test_a_hung_nvml_call_fails_its_gpu_and_holds_no_heartbeat(tmp_path, agent_factory):
    gpus = GpuState(tmp_path / "nvml", count=2)
    agent, state_dir, first = start(tmp_path, agent_factory, gpus, inventory_probe_timeout_sec=2)
    gpus.gpus[1]["hang_ms"] = {"nvmlDeviceGetFieldValues": 12_000}  # a driver that stopped answering
    gpus.write()
    hung = wait_for(lambda: [e for e in health_events(state_dir) if e["index"] == 1], 15, what="the hung GPU's event")[
        0
    ]
    assert (hung["uuid"], hung["old"], hung["new"]) == (first["devices"][1]["uuid"], "ok", "failed")
    assert hung["reasons"] == ["NVML call hung: nvmlDeviceGetFieldValues"]
    gpus.gpus[1]["hang_ms"] = {}  # the next calls answer; the hung one returns when its 12 s end
    gpus.write()
    gpus.xid(0, 79)  # during the hang: still a verdict (the Xid log is judged without NVML)
    xid = wait_for(lambda: [e for e in health_events(state_dir) if e["index"] == 0], 10, what="GPU 0's Xid")[0]
    assert xid["new"] == "failed" and xid["reasons"] == ["Xid 79: GPU has fallen off the bus (reboot needed)"]
    record = [r for r in records(state_dir, protocol.INVENTORY) if r["type"] == "full"][-1]
    assert record["probes"]["gpu"]["status"] == "overrun" and record["probes"]["host"]["status"] == "ok"
    assert record["gpu"]["health"]["verdict"] == "failed"
    wait_for(lambda: "gpu" in agent.workers()["inventory"]["status"]["overrun"], 5, what="gpu in status.overrun")
    for _ in range(4):  # while the call hangs, the worker stays alive and beating
        worker = agent.workers()["inventory"]
        assert worker["state"] == "RUNNING" and worker["restarts"] == 0 and worker["heartbeat_age_s"] < 2
        time.sleep(0.5)
    # the call returns: the recovery is an event
    back = wait_for(lambda: [e for e in health_events(state_dir) if e["index"] == 1][1:], 30, what="GPU 1 back")
    assert (back[0]["old"], back[0]["new"]) == ("failed", "ok")


def test_no_driver_and_a_broken_library_are_reasons_not_crashes(tmp_path, agent_factory):
    gpus = GpuState(tmp_path / "nvml", count=1)
    gpus.top["init_error"] = 9  # NVML_ERROR_DRIVER_NOT_LOADED
    gpus.write()
    agent, state_dir, first = start(tmp_path, agent_factory, gpus)
    assert first["available"] is False and first["reason"] == "no NVIDIA driver loaded"
    assert first["health"] == {"verdict": "failed", "reasons": ["no NVIDIA driver loaded"]}
    assert agent.workers()["inventory"]["state"] == "RUNNING"


def admin_show(backend, node_id: str, what: str):
    result = subprocess.run(
        [sys.executable, "-m", "faden_agent", "admin", "show", node_id, what, "--url", backend.url],
        env={"FADEN_ADMIN_TOKEN": backend.admin_token, "PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


def test_the_operator_sees_verdicts_and_events_with_admin_show(backend, tmp_path):
    gpus = GpuState(tmp_path / "nvml", count=2)
    env = agent_env_for(backend, tmp_path, inventory_interval_sec=1, inventory_usage_sec=1)
    env.update(gpus.env())
    agent = AgentProcess(env, tmp_path / "agent.log").start()
    try:
        node_id = backend.wait_node(env["FADEN_NODE_AGENT_AGENT_ID"])["node_id"]
        gpus.gpus[0]["remap"].update(pending=1)
        gpus.write()
        gpus.xid(1, 48)

        def shown():
            records = admin_show(backend, node_id, "events")["events"]
            events = [r["data"] for r in records if r["data"].get("type") == "gpu.health_changed"]
            return len(events) == 2 and events

        events = wait_for(shown, 30, interval_s=0.5, what="both events in admin show NODE events")
        assert sorted((e["index"], e["new"], tuple(e["reasons"])) for e in events) == [
            (0, "degraded", ("row remap pending: reset needed",)),
            (1, "failed", ("Xid 48: double-bit ECC error (reset needed)",)),
        ]

        def both_verdicts():
            inventory = admin_show(backend, node_id, "inventory")["inventory"]
            return inventory["gpu"]["health"]["verdict"] == "failed" and inventory

        inventory = wait_for(both_verdicts, 15, interval_s=0.5, what="the record after the events")
        assert [d["health"]["verdict"] for d in inventory["gpu"]["devices"]] == ["degraded", "failed"]
        assert inventory["gpu"]["health"] == {
            "verdict": "failed",
            "reasons": [
                "GPU 0: row remap pending: reset needed",
                "GPU 1: Xid 48: double-bit ECC error (reset needed)",
            ],
        }
    finally:
        agent.stop()
        agent.kill()


def test_metrics_name_every_gpu_by_uuid_with_its_verdict_and_xids(tmp_path, agent_factory):
    # A real scrape: gpu_info names each GPU, every GPU series carries its UUID,
    # the verdict and the Xid counter follow an Xid.
    gpus = GpuState(tmp_path / "nvml", count=2)
    agent, state_dir, first = start(tmp_path, agent_factory, gpus)
    gpus.xid(1, 79)
    uuid_1 = first["devices"][1]["uuid"]

    def failed_in_scrape():
        scrape = get(agent)
        return scrape.value("faden_agent_gpu_health", uuid=uuid_1, verdict="failed") == 1 and scrape

    scrape = wait_for(failed_in_scrape, 20, what="GPU 1 failed in /metrics")
    families = scrape.families()
    info = sorted(
        (s.labels["gpu"], s.labels["uuid"], s.labels["pci_bus_id"]) for s in families["faden_agent_gpu_info"].samples
    )
    assert info == [(str(d["index"]), d["uuid"], d["pci_bus_id"]) for d in first["devices"]]
    gpu_samples = [s for name, f in families.items() if name.startswith("faden_agent_gpu_") for s in f.samples]
    assert gpu_samples and all(s.labels.get("uuid") for s in gpu_samples)
    assert scrape.value("faden_agent_gpu_xid_errors_total", uuid=uuid_1, xid="79") == 1
    assert scrape.value("faden_agent_gpu_memory_size_bytes", gpu="0") == first["devices"][0]["memory_total"]
    assert promtool_check(scrape.body) == ""  # Prometheus' linter over a scrape with every GPU family


def test_a_restart_keeps_the_evidence_and_a_gpu_gone_meanwhile_is_failed(tmp_path, agent_factory):
    # The Xid log, the verdicts, the GPUs seen and the baselines live in gpu-evidence.json:
    # after a restart an Xid seen before still fails its GPU (and is no second event), a
    # link seen up and now down is down, and a GPU that vanished while the agent was down
    # is failed "missing since <time>".
    gpus = GpuState(tmp_path / "nvml", count=3)
    agent, state_dir, first = start(tmp_path, agent_factory, gpus)
    gpus.xid(0, 79)
    wait_for(lambda: [e for e in health_events(state_dir) if e["index"] == 0], 10, what="the Xid's event")
    evidence = state_dir / "gpu-evidence.json"
    wait_for(lambda: evidence.exists() and b'"code":79' in evidence.read_bytes(), 10, what="the Xid kept on disk")
    assert evidence.stat().st_mode & 0o777 == 0o600
    agent.stop()
    events_before = len(health_events(state_dir))

    gpus.gpus[0]["ecc"]["uncorrected"]["volatile"] = 2  # rose while away: the baseline says so
    gpus.gpus[1]["nvlink"]["0"]["active"] = 0  # NVLink 0 goes down while the agent is away ...
    gpus.gpus[1]["nvlink"]["1"]["active"] = 0  # ... and 1 too: only the evidence knows they were up
    gpus.top["count"] = 2  # GPU 2 falls off while the agent is down
    gpus.write()
    agent_factory(agent.env).start()

    def judged():
        gpu = newest_gpu(state_dir)
        return gpu.get("missing") and gpu["devices"][1]["health"]["verdict"] != "ok" and gpu

    gpu = wait_for(judged, 30, what="a record after the restart with the evidence applied")
    assert gpu["devices"][0]["health"]["reasons"] == [
        "Xid 79: GPU has fallen off the bus (reboot needed)",
        "uncorrected ECC errors rising",
    ]
    assert gpu["devices"][0]["health"]["usage"]["xid_totals"] == {"79": 1}  # the counter survives too
    assert gpu["devices"][1]["health"]["reasons"] == ["NVLink 0 down", "NVLink 1 down"]
    missing = gpu["missing"][0]
    assert (missing["uuid"], missing["pci_bus_id"]) == (first["devices"][2]["uuid"], first["devices"][2]["pci_bus_id"])
    assert missing["health"]["verdict"] == "failed"
    assert missing["health"]["reasons"][0].startswith("GPU missing since 20")
    new = health_events(state_dir)[events_before:]
    assert sorted((e["index"], e["old"], e["new"]) for e in new) == [(1, "ok", "degraded"), (2, "ok", "failed")]


def test_a_corrupt_evidence_file_is_moved_aside_and_reported(tmp_path, agent_factory):
    gpus = GpuState(tmp_path / "nvml", count=1)
    state_dir = tmp_path / "state"
    state_dir.mkdir(mode=0o700)
    (state_dir / "gpu-evidence.json").write_text('{"version": 1, "gpus": {"GPU-x": {"index": "zero"}}}')
    _, state_dir, first = start(tmp_path, agent_factory, gpus)
    assert first["health"]["verdict"] == "ok"
    quarantined = [e for e in records(state_dir, protocol.EVENT) if e.get("type") == "agent.file_quarantined"]
    assert quarantined and quarantined[0]["file"] == "GPU evidence" and "index is 'zero'" in quarantined[0]["error"]
    assert list(state_dir.glob("gpu-evidence.json.corrupt-*"))


def test_the_kernels_xid_lines_are_verdicts_even_those_written_while_the_agent_was_down(tmp_path, agent_factory):
    # Real journal files (systemd-journal-remote): the inventory worker follows their kernel
    # transport after a cursor kept in gpu-evidence.json.
    journal = JournalWriter(tmp_path / "journal")
    journal.boot_id = read_boot_id()  # only this boot's kernel lines count: a reboot fixed the rest
    kernel_line(journal, "usb 1-1: new high-speed USB device")
    gpus = GpuState(tmp_path / "nvml", count=2)
    agent, state_dir, first = start(tmp_path, agent_factory, gpus, journal_directory=tmp_path / "journal")
    kernel_line(journal, "NVRM: Xid (PCI:0000:18:00): 79, pid=1896, name=python3, GPU has fallen off the bus.")
    event = wait_for(lambda: health_events(state_dir), 10, what="the kernel Xid's event")[0]
    assert (event["index"], event["uuid"], event["new"]) == (1, first["devices"][1]["uuid"], "failed")
    assert event["reasons"] == ["Xid 79: GPU has fallen off the bus (reboot needed)"]
    kernel_line(journal, "nvidia-nvswitch2: SXid (PCI:0000:c1:00.0): 20034, Fatal, Link 44 LTSSM Fault Up")
    gpu = wait_for(lambda: newest_gpu(state_dir).get("nvswitches") and newest_gpu(state_dir), 10, what="the SXid")
    assert [(s["pci_bus_id"], [x["code"] for x in s["sxid"]]) for s in gpu["nvswitches"]] == [("0000:c1:00", [20034])]
    # a fatal SXid fails every GPU of the fabric, until each is reset
    for index in (0, 1):
        assert f"GPU {index}: NVSwitch 0000:c1:00: SXid 20034 (fatal): fabric reset needed" in gpu["health"]["reasons"]
    gpus.xid(1, 79)  # NVML's event of the same Xid: one entry in the log
    wait_for(lambda: b"kernel" in (state_dir / "gpu-evidence.json").read_bytes(), 10, what="the cursor saved")
    agent.stop()

    # while the agent is down: an Xid 48 on GPU 0, and a line of an older boot (no verdict)
    old_boot = JournalWriter(tmp_path / "journal", name="old.journal")
    kernel_line(old_boot, "NVRM: Xid (PCI:0000:17:00): 95, pid=1, Uncontained")
    kernel_line(journal, "NVRM: Xid (PCI:0000:17:00): 48, pid=2, name=python3, DBE (0x1)")
    agent_factory(agent.env).start()
    gpu = wait_for(
        lambda: "Xid 48" in str(newest_gpu(state_dir)["devices"][0]["health"]["reasons"]) and newest_gpu(state_dir),
        15,
        what="GPU 0 failed by the Xid written while the agent was down",
    )
    assert gpu["devices"][0]["health"]["reasons"] == [
        "Xid 48: double-bit ECC error (reset needed)",
        "NVSwitch 0000:c1:00: SXid 20034 (fatal): fabric reset needed",  # kept across the restart
    ]
    assert [(x["code"], x["source"]) for x in gpu["devices"][1]["health"]["xid"]] == [(79, "kernel")]


def test_an_inventory_worker_killed_during_a_fault_keeps_the_verdict_and_says_it_once(tmp_path, agent_factory):
    gpus = GpuState(tmp_path / "nvml", count=2)
    agent, state_dir, first = start(tmp_path, agent_factory, gpus)
    gpus.gpus[1]["lost"] = 1
    gpus.write()
    wait_for(lambda: [e for e in health_events(state_dir) if e["index"] == 1], 15, what="the lost GPU's event")
    evidence = state_dir / "gpu-evidence.json"
    wait_for(lambda: b'"verdict":"failed"' in evidence.read_bytes(), 10, what="the verdict kept on disk")

    def held_gpu(since: float) -> dict | None:
        """The gpu section the receiver holds after the first inventory record collected after
        `since`: a new worker goes on with the chain (record.HeldFile), full or unchanged."""
        rows = records(state_dir, protocol.INVENTORY)
        full = {r["hash"]: r for r in rows if r["type"] == "full"}
        new = [r for r in rows if r["collected_at"] > since]
        return full[new[0]["hash"]]["gpu"] if new else None

    killed_at = time.time()
    os.kill(agent.workers()["inventory"]["pid"], signal.SIGKILL)
    wait_for(lambda: agent.workers()["inventory"]["restarts"] == 1, 30, what="the inventory worker restarted")
    gpu = wait_for(lambda: held_gpu(killed_at), 30, what="the new worker's record")
    assert gpu["devices"][1]["health"]["reasons"] == ["GPU is lost"]
    assert [(e["index"], e["new"]) for e in health_events(state_dir)] == [(1, "failed")]  # not said twice
