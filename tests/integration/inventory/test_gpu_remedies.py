"""Holds that end on the remedy, in a real agent on tests/nvml's C GPUs: an Xid 48 stays failed
past its clock and across a restart until a reset shows in NVML (also one done while the agent
was down), an Xid 79 until the boot id changes (a reset does not do); the kernel's lines from a
kmsg file where there is no journal, none at all a node reason, a bad journal position read
from the boot's start."""

from __future__ import annotations

import time
from pathlib import Path

import orjson
import pytest

from faden_agent.node.gpu_faults import EVIDENCE_FILE
from tests.nvml.state import GpuState
from tests.support.agentproc import wait_for
from tests.support.gpuagent import health_events, kmsg_record, newest_gpu, start
from tests.support.journalfiles import JournalWriter
from tests.support.kernellog import boot_file, kernel_line, kmsg_record

pytestmark = pytest.mark.docker

XID_48 = "Xid 48: double-bit ECC error (reset needed)"
XID_79 = "Xid 79: GPU has fallen off the bus (reboot needed)"


def events_of(state_dir: Path, index: int) -> list[dict]:
    return [e for e in health_events(state_dir) if e["index"] == index]


def test_an_xid_48_holds_past_its_clock_and_a_restart_until_a_reset_shows(tmp_path, agent_factory):
    gpus = GpuState(tmp_path / "nvml", count=2)
    # the clock of clock-class Xids is 2 s here: a reset-class one must not care
    agent, state_dir, first = start(tmp_path, agent_factory, gpus, gpu_xid_hold_sec=2, gpu_rising_sec=1)
    gpus.double_bit_error(1)  # what a real DBE shows: the counts rise, Xid 48, NVML's DBE event
    failed = wait_for(lambda: events_of(state_dir, 1), 10, what="GPU 1 failed by the Xid 48")[0]
    assert failed["new"] == "failed" and XID_48 in failed["reasons"]
    time.sleep(6)  # three clocks later, rounds every second
    assert len(events_of(state_dir, 1)) == 1
    assert XID_48 in newest_gpu(state_dir)["devices"][1]["health"]["reasons"]
    agent.stop()
    again = agent_factory(agent.env).start()  # a restart: the hold is kept with the evidence
    wait_for(lambda: cycles(again) >= 3, 30, what="three rounds of the new run")
    assert newest_gpu(state_dir)["devices"][1]["health"]["verdict"] == "failed"
    assert len(events_of(state_dir, 1)) == 1

    gpus.reset(1)  # nvidia-smi -r, as NVML shows it after
    back = wait_for(lambda: events_of(state_dir, 1)[1:], 10, what="the reset ending the hold")[0]
    assert (back["old"], back["new"]) == ("failed", "degraded")
    assert back["reasons"] == ["1 uncorrected ECC errors on record"]  # the board's lifetime count stays
    device = wait_for(lambda: newest_gpu(state_dir)["devices"][1]["health"]["last_reset"], 10, what="last_reset")
    assert device["sign"] in (
        "ecc_corrected_volatile went back from 5 to 0",
        "ecc_uncorrected_volatile went back from 1 to 0",
    )


def cycles(agent) -> int:
    return (agent.workers()["inventory"].get("status") or {}).get("cycles") or 0


def test_a_reset_while_the_agent_was_down_ends_the_hold_at_its_start(tmp_path, agent_factory):
    gpus = GpuState(tmp_path / "nvml", count=1)
    agent, state_dir, _ = start(tmp_path, agent_factory, gpus, gpu_rising_sec=1)
    gpus.xid(0, 95)  # uncontained ECC error: RESET_GPU
    wait_for(lambda: events_of(state_dir, 0), 10, what="GPU 0 failed")
    wait_for(lambda: b'"code":95' in (state_dir / EVIDENCE_FILE).read_bytes(), 10, what="the Xid kept")
    agent.stop()
    gpus.reset(0)  # while nobody watched: the evidence's last read tells it
    agent_factory(agent.env).start()
    back = wait_for(lambda: events_of(state_dir, 0)[1:], 20, what="ok again after the restart")[0]
    assert (back["old"], back["new"], back["reasons"]) == ("failed", "ok", [])


def test_an_xid_79_holds_through_a_reset_and_ends_with_a_new_boot_id(tmp_path, agent_factory):
    gpus = GpuState(tmp_path / "nvml", count=2)
    boot = boot_file(tmp_path, "a" * 32)
    agent, state_dir, _ = start(tmp_path, agent_factory, gpus, boot_id_file=boot)
    gpus.xid(1, 79)
    failed = wait_for(lambda: events_of(state_dir, 1), 10, what="GPU 1 failed by the Xid 79")[0]
    assert failed["reasons"] == [XID_79]
    logged = wait_for(lambda: newest_gpu(state_dir)["devices"][1]["health"]["xid"], 10, what="the Xid in the record")
    assert logged[0]["boot"] == "a" * 32  # NVML's event, kept with this boot's id
    gpus.reset(1)  # RESTART_BM: a reset is not the remedy
    time.sleep(5)
    assert len(events_of(state_dir, 1)) == 1
    agent.stop()
    again = agent_factory(agent.env).start()  # a restart of the agent is no reboot either
    wait_for(lambda: cycles(again) >= 3, 30, what="three rounds of the new run")
    assert len(events_of(state_dir, 1)) == 1
    again.stop()
    boot_file(tmp_path, "b" * 32)  # the machine rebooted
    agent_factory(agent.env).start()
    back = wait_for(lambda: events_of(state_dir, 1)[1:], 20, what="GPU 1 ok after the reboot")[0]
    assert (back["old"], back["new"], back["reasons"]) == ("failed", "ok", [])
    assert [x["code"] for x in newest_gpu(state_dir)["devices"][1]["health"]["xid"]] == [79]  # history stays


def test_without_a_journal_the_kernel_lines_come_from_kmsg_and_without_both_it_is_said(tmp_path, agent_factory):
    gpus = GpuState(tmp_path / "nvml", count=2)
    no_journal = tmp_path / "no-journal"
    no_journal.mkdir()
    kmsg = tmp_path / "kmsg"  # not there yet: no kernel source at all
    agent, state_dir, _ = start(tmp_path, agent_factory, gpus, journal_directory=no_journal, kmsg_path=kmsg)
    blind = f"no kernel log: no journal files in {no_journal}; {kmsg}: No such file or directory"
    gpu = wait_for(lambda: newest_gpu(state_dir)["health"]["reasons"] and newest_gpu(state_dir), 20, what="the reason")
    assert gpu["health"] == {"verdict": "degraded", "reasons": [f"{blind}: GPU faults of the kernel log not seen"]}

    kmsg.write_bytes(kmsg_record(1, "NVRM: loading NVIDIA UNIX x86_64 Kernel Module"))
    wait_for(lambda: newest_gpu(state_dir)["health"]["verdict"] == "ok", 30, what="the kmsg file taken (10 s retry)")
    # a status sent after that record: ps's last one may be older than the round that found kmsg
    status = agent.row_sent_after("inventory", time.monotonic())["status"]["kernel_lines"]
    assert (status["source"], status["problem"]) == ("kmsg", None)
    with open(kmsg, "ab") as fh:
        fh.write(kmsg_record(2, "NVRM: Xid (PCI:0000:18:00): 79, pid=4242, name=python3, GPU has fallen off the bus."))
        fh.write(
            kmsg_record(
                3,
                "NVRM: The NVIDIA GPU 0000:c3:00.0 (PCI ID: 10de:2330) installed in this system has fallen off the "
                "bus and is not responding to commands.",
            )
        )
    event = wait_for(lambda: events_of(state_dir, 1), 10, what="GPU 1 failed by the kmsg line")[0]
    assert event["reasons"] == [XID_79]
    gpu = wait_for(lambda: newest_gpu(state_dir).get("unplaced_xids") and newest_gpu(state_dir), 10, what="unplaced")
    (unplaced,) = gpu["unplaced_xids"]
    assert unplaced["pci_bus_id"] == "0000:c3:00" and [x["code"] for x in unplaced["xid"]] == [79]
    assert f"PCI 0000:c3:00 (no GPU seen there): {XID_79}" in gpu["health"]["reasons"]
    (xid,) = gpu["devices"][1]["health"]["xid"]
    assert (xid["source"], xid["pid"], xid["process"]) == ("kernel", 4242, "python3")
    wait_for(lambda: b'"kernel_cursor":"kmsg:' in (state_dir / EVIDENCE_FILE).read_bytes(), 10, what="the position")
    agent.stop()
    again = agent_factory(agent.env).start()  # after its position: no line read twice
    wait_for(lambda: cycles(again) >= 3, 30, what="three rounds of the new run")
    assert [x["code"] for x in newest_gpu(state_dir)["devices"][1]["health"]["xid"]] == [79]


def test_a_bad_journal_position_reads_from_the_boot_s_start(tmp_path, agent_factory):
    journal = JournalWriter(tmp_path / "journal")
    journal.boot_id = "c" * 32
    boot = boot_file(tmp_path, journal.boot_id)
    kernel_line(journal, "usb 1-1: new high-speed USB device")
    gpus = GpuState(tmp_path / "nvml", count=2)
    agent, state_dir, _ = start(tmp_path, agent_factory, gpus, journal_directory=journal.directory, boot_id_file=boot)
    evidence = state_dir / EVIDENCE_FILE
    wait_for(lambda: b'"kernel_cursor":"journald:' in evidence.read_bytes(), 20, what="a journal position saved")
    agent.stop()
    for read, bad in enumerate(("journald:s=1;i=5", "journald:" + "x" * 200), start=1):
        data = orjson.loads(evidence.read_bytes())
        data["kernel_cursor"] = bad
        evidence.write_bytes(orjson.dumps(data))
        kernel_line(journal, f"NVRM: Xid (PCI:0000:17:00): 48, pid=2, name=python3, DBE {read}")
        agent = agent_factory(agent.env).start()

        def kernel_48s() -> list[dict]:
            xids = newest_gpu(state_dir)["devices"][0]["health"]["xid"]
            return [x for x in xids if (x["code"], x["source"]) == (48, "kernel")]

        # every line of the boot read again (the log keeps a line once) and the one written meanwhile
        wait_for(lambda read=read: len(kernel_48s()) == read, 20, what=f"the lines read after {bad[:20]!r}")
        assert XID_48 in newest_gpu(state_dir)["devices"][0]["health"]["reasons"]
        status = agent.row_sent_after("inventory", time.monotonic())["status"]["kernel_lines"]
        assert status["source"] == "journald" and "boot's start" in status["note"]
        agent.stop()
