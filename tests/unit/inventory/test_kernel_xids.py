"""Kernel Xid lines (gpu/kernel_xids.py) as data: the line forms of NVIDIA's driver, bus ids as
the kernel and NVML write them, and one Xid seen by NVML and the kernel kept once; the
journal itself is read in tests/integration/inventory/test_gpu_health.py (real journal files)."""

from __future__ import annotations

import threading

import orjson

from faden_agent.workers.inventory.gpu.kernel_xids import KernelXidReader, bus_key, parse
from faden_agent.workers.inventory.gpu.xids import XidLog


def test_the_driver_line_forms_are_read():
    assert parse("NVRM: Xid (PCI:0000:18:00): 79, pid=1896, name=python, GPU has fallen off the bus.") == (
        "xid",
        "0000:18:00",
        79,
    )
    assert parse("NVRM: Xid (PCI:0000:10:1c): 63, pid=1896, Row Remapper: New row marked for remapping") == (
        "xid",
        "0000:10:1c",
        63,
    )
    assert parse("NVRM: Xid (0000:01:00): 3, C 00000005 SC 00000007") == ("xid", "0000:01:00", 3)
    # "fallen off the bus" without an Xid: Xid 79
    assert parse("NVRM: GPU at 0000:01:00.0 has fallen off the bus.") == ("xid", "0000:01:00", 79)
    assert parse("NVRM: GPU 0000:2b:00.0: GPU has fallen off the bus.") == ("xid", "0000:2b:00", 79)
    assert parse("nvidia-nvswitch3: SXid (PCI:0000:c1:00.0): 20034, Fatal, Link 44 LTSSM Fault Up") == (
        "sxid_fatal",
        "0000:c1:00",
        20034,
    )
    assert parse("nvidia-nvswitch0: SXid (PCI:0000:05:00.0): 12028, Non-fatal, Link 32 egress error") == (
        "sxid",
        "0000:05:00",
        12028,
    )
    for other in ("usb 1-1: new device", "NVRM: loading NVIDIA UNIX x86_64 Kernel Module", "Xid 79 said a user", ""):
        assert parse(other) is None


def test_kernel_and_nvml_bus_ids_meet():
    assert bus_key("0000:18:00") == bus_key("00000000:18:00.0") == (0, 0x18, 0)
    assert bus_key("0001:C1:00.0") == (1, 0xC1, 0)
    assert bus_key("not:a:bus") is None and bus_key(None) is None and bus_key("18:00") is None


def test_one_xid_from_nvml_and_the_kernel_is_kept_once_and_a_reread_line_too():
    log = XidLog(keep=8)
    assert log.add("GPU-a", "xid", 79, 100.0) is True  # NVML's event
    assert log.add("GPU-a", "xid", 79, 100.4, source="kernel") is False  # its kernel line
    assert log.add("GPU-a", "xid", 48, 200.0, source="kernel") is True
    assert log.add("GPU-a", "xid", 48, 200.0, source="kernel") is False  # read again after a restart
    assert [(e["code"], e["source"]) for e in log.of("GPU-a")] == [(79, "nvml"), (48, "kernel")]


def test_an_entry_goes_to_the_gpu_at_its_bus_and_moves_the_cursor():
    log, woken = XidLog(), []
    gpus = {(0, 0x18, 0): "GPU-a"}
    reader = KernelXidReader(log, gpus.get, lambda: woken.append(1), threading.Event(), boot_id="b")
    line = {
        "__CURSOR": "s=1;i=5",
        "__REALTIME_TIMESTAMP": "1796000000500000",
        "MESSAGE": "NVRM: Xid (PCI:0000:18:00): 48, pid=7, DBE (0x1) (0x2)",
    }
    reader.take(orjson.dumps(line) + b"\n")
    assert log.of("GPU-a") == [{"event": "xid", "code": 48, "at": 1796000000.5, "source": "kernel"}]
    assert woken == [1] and reader.cursor == "s=1;i=5"
    # a GPU this agent never saw, a line not about GPUs, junk, bytes: counted or skipped, never raised
    reader.take(orjson.dumps({**line, "__CURSOR": "c6", "MESSAGE": "NVRM: Xid (PCI:0000:99:00): 79, x"}) + b"\n")
    reader.take(orjson.dumps({"__CURSOR": "c7", "MESSAGE": [78, 86, 82, 77, 255]}) + b"\n")
    reader.take(b"{not json\n")
    reader.take(b"[1, 2]\n")
    assert reader.unplaced == 1 and reader.cursor == "c7" and len(log.of("GPU-a")) == 1
    assert "_TRANSPORT=kernel" in reader.argv() and "_BOOT_ID=b" in reader.argv()
    assert any(a.startswith("--after-cursor=c7") for a in reader.argv())
