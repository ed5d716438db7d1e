"""Kernel Xid lines (gpu/kernel_xids.py) as data: the line forms of NVIDIA's driver (with the
pid and process they name), bus ids as the kernel and NVML write them, one Xid seen by NVML
and the kernel kept once, lines of an unseen bus id kept; the source of the lines is tested
in test_kernel_lines.py and with real journal files in tests/integration/inventory."""

from __future__ import annotations

from faden_agent.workers.inventory.gpu.kernel_xids import KernelXids, bus_key, parse
from faden_agent.workers.inventory.gpu.xids import UNPLACED, XidLog
from faden_agent.workers.inventory.kernel.lines import KernelLine


def test_the_driver_line_forms_are_read():
    assert parse("NVRM: Xid (PCI:0000:18:00): 79, pid=1896, name=python, GPU has fallen off the bus.") == (
        "xid",
        "0000:18:00",
        79,
        {"pid": 1896, "process": "python"},
    )
    assert parse("NVRM: Xid (PCI:0000:10:1c): 63, pid='<unknown>', name=<unknown>, Row Remapper: New row") == (
        "xid",
        "0000:10:1c",
        63,
        {"process": "<unknown>"},
    )
    assert parse("NVRM: Xid (0000:01:00): 3, C 00000005 SC 00000007") == ("xid", "0000:01:00", 3, {})
    # "fallen off the bus" without an Xid: Xid 79; also the driver's probe-time line of a GPU NVML never lists
    assert parse("NVRM: GPU at 0000:01:00.0 has fallen off the bus.") == ("xid", "0000:01:00", 79, {})
    assert parse("NVRM: GPU 0000:2b:00.0: GPU has fallen off the bus.") == ("xid", "0000:2b:00", 79, {})
    probe_time = (
        "NVRM: The NVIDIA GPU 0000:c3:00.0 (PCI ID: 10de:2330) installed in this system has fallen off the bus "
        "and is not responding to commands."
    )
    assert parse(probe_time) == ("xid", "0000:c3:00", 79, {})
    assert parse("nvidia-nvswitch3: SXid (PCI:0000:c1:00.0): 20034, Fatal, Link 44 LTSSM Fault Up") == (
        "sxid_fatal",
        "0000:c1:00",
        20034,
        {},
    )
    assert parse("nvidia-nvswitch0: SXid (PCI:0000:05:00.0): 12028, Non-fatal, Link 32 egress error") == (
        "sxid",
        "0000:05:00",
        12028,
        {},
    )
    for other in ("usb 1-1: new device", "NVRM: loading NVIDIA UNIX x86_64 Kernel Module", "Xid 79 said a user", ""):
        assert parse(other) is None
    assert parse("NVRM: Xid (PCI:0000:18:00): 99999999999999, x") is None  # no code that long


def test_kernel_and_nvml_bus_ids_meet():
    assert bus_key("0000:18:00") == bus_key("00000000:18:00.0") == (0, 0x18, 0)
    assert bus_key("0001:C1:00.0") == (1, 0xC1, 0)
    assert bus_key("not:a:bus") is None and bus_key(None) is None and bus_key("18:00") is None
    assert bus_key("1:" * 40) is None


def test_one_xid_from_nvml_and_the_kernel_is_kept_once_and_a_reread_line_too():
    log = XidLog(keep=8)
    assert log.add("GPU-a", "xid", 79, 100.0) is True  # NVML's event
    assert log.add("GPU-a", "xid", 79, 100.4, source="kernel") is False  # its kernel line
    assert log.add("GPU-a", "xid", 48, 200.0, source="kernel") is True
    assert log.add("GPU-a", "xid", 48, 200.0, source="kernel") is False  # read again after a restart
    assert [(e["code"], e["source"]) for e in log.of("GPU-a")] == [(79, "nvml"), (48, "kernel")]


def test_a_kmsg_line_read_again_by_a_new_run_is_kept_once_though_its_time_moved():
    # a kmsg line's time is the boot's wall time as each run computes it, plus the line's offset:
    # a run after a restart computes it a few microseconds (or, after a clock slew, more) apart
    log = XidLog(keep=8)
    boot = "b" * 32
    assert log.add("GPU-a", "xid", 79, 1796000000.1234, source="kernel", boot=boot, seq=812) is True
    assert log.add("GPU-a", "xid", 79, 1796000000.1251, source="kernel", boot=boot, seq=812) is False
    # another record of that boot at (almost) that time is another line: a storm counts each
    log.add("GPU-a", "xid", 79, 1796000000.1252, source="kernel", boot=boot, seq=813)
    # the same number in the next boot is a new line (kmsg numbers its records from 0 each boot)
    log.add("GPU-a", "xid", 79, 1796090000.0, source="kernel", boot="c" * 32, seq=812)
    assert [(e["seq"], e["boot"][0]) for e in log.of("GPU-a")] == [(812, "b"), (813, "b"), (812, "c")]
    assert log.totals("GPU-a") == {"79": 3}


def test_a_kmsg_line_of_a_new_run_meets_the_line_an_earlier_run_kept():
    text = "NVRM: Xid (PCI:0000:18:00): 48, pid=7, name=python3, DBE (0x1) (0x2)"
    gpus = {(0, 0x18, 0): "GPU-a"}
    first, again = XidLog(), XidLog()
    KernelXids(first, gpus.get, lambda: None, lambda pid: None).take(
        KernelLine(text, 1796000000.4, "b" * 32, "kmsg", 3, seq=77)
    )
    again.restore("GPU-a", first.of("GPU-a"))  # the evidence file, read at the new run's start
    KernelXids(again, gpus.get, lambda: None, lambda pid: None).take(
        KernelLine(text, 1796000000.405, "b" * 32, "kmsg", 3, seq=77)  # after the saved position's
    )
    assert [(e["code"], e["seq"], e["at"]) for e in again.of("GPU-a")] == [(48, 77, 1796000000.4)]


def line(text: str, at: float = 1796000000.5) -> KernelLine:
    return KernelLine(text, at, "b" * 32, "journald", 3)


def test_a_line_goes_to_the_gpu_at_its_bus_with_its_boot_pid_and_container():
    log, woken = XidLog(), []
    gpus = {(0, 0x18, 0): "GPU-a"}
    containers = {7: "c" * 64}
    reader = KernelXids(log, gpus.get, lambda: woken.append(1), containers.get)
    reader.take(line("NVRM: Xid (PCI:0000:18:00): 48, pid=7, name=python3, DBE (0x1) (0x2)"))
    assert log.of("GPU-a") == [
        {
            "event": "xid",
            "code": 48,
            "at": 1796000000.5,
            "source": "kernel",
            "boot": "b" * 32,
            "pid": 7,
            "process": "python3",
            "container_id": "c" * 64,
        }
    ]
    assert woken == [1] and reader.read == 1
    # a GPU this agent never saw: kept (and counted) under its bus id; other lines skipped, never raised
    reader.take(line("NVRM: Xid (PCI:0000:99:00): 79, pid=1, x", at=1796000001.0))
    reader.take(line("usb 1-1: new device"))
    reader.take(line("NVRM: Xid (PCI:zzzz:99:00): 79, x"))
    assert reader.unplaced == 1 and len(log.of("GPU-a")) == 1
    (unplaced,) = log.unplaced()
    assert unplaced["pci_bus_id"] == "0000:99:00" and [x["code"] for x in unplaced["xid"]] == [79]
    assert log.by_bus(UNPLACED)[0][0] == "0000:99:00"
