"""The GPU evidence file as hostile input: every field of a full file replaced by each value of
the wrong type or size, one at a time, and the file replaced by a FIFO, a link, a directory, a
huge or binary file. No reader may break: the inventory moves a wrong file aside naming the
field (and starts afresh), the executor's reader takes it as no evidence, and whatever is
accepted restores, judges and explains a death without an exception."""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path
from typing import Any

import orjson
import pytest

from faden_agent.node.gpu_faults import EVIDENCE_FILE, read_gpus
from faden_agent.workers.executor.death_cause import cause
from faden_agent.workers.inventory.gpu import evidence as gpu_evidence
from faden_agent.workers.inventory.gpu.health import HealthReader
from faden_agent.workers.inventory.gpu.holds import Holds
from faden_agent.workers.inventory.gpu.probe import GpuProbe
from faden_agent.workers.inventory.gpu.xids import XidLog

NOW = time.time()
BOOT = "b" * 32


def entry(code: int, at: float, **more: Any) -> dict[str, Any]:
    return {"event": "xid", "code": code, "at": at, "source": "kernel", "boot": BOOT, **more}


def full_file() -> dict[str, Any]:
    """Every field the inventory writes, each with a value."""
    return {
        "version": 1,
        "kernel_cursor": "kmsg:" + BOOT + ":17",
        "gpus": {
            "GPU-a": {
                "index": 0,
                "pci_bus_id": "00000000:17:00.0",
                "seen_at": int(NOW) // 60 * 60,
                "verdict": "failed",
                "verdict_change": {"old": "ok", "new": "failed", "reasons": ["Xid 48: x"], "at": NOW - 10},
                "xid": [entry(48, NOW - 12, pid=7, process="python3", container_id="c" * 64), entry(13, NOW - 11)],
                "xid_totals": {"48": 1, "13": 4},
                "counters": {"ecc_uncorrected_volatile": 1, "pcie_replay": 3},
                "rose_at": {"ecc_uncorrected_volatile": NOW - 12},
                "links_up": [0, 1],
                "reset_view": {"failing": None, "ecc_corrected_volatile": 5, "retired_pending": False},
                "last_reset": {"at": NOW - 3600, "sign": "ecc_corrected_volatile went back from 5 to 0", "boot": BOOT},
                "containers": {"c" * 64: NOW - 20},
                "last_check": {
                    "at": NOW - 60,
                    "tool": "dcgm",
                    "level": 2,
                    "outcome": "fail",
                    "counted": True,
                    "failed": ["memory: Found 3 faulty memory elements on GPU 0"],
                    "warned": [],
                    "boot": BOOT,
                },
            }
        },
        "switches": {"0000:c1:00": [{"event": "sxid_fatal", "code": 20034, "at": NOW - 5, "source": "kernel"}]},
        "unplaced": {"0000:c3:00": [entry(79, NOW - 30, seq=812)]},
    }


HOSTILE = ("x", 5, -1, 1e308, None, [], {}, True, 2**63, "a" * 5000, [[[[[]]]]], {"k": {"k": {"k": 1}}})


def paths(value: Any, at: tuple = ()) -> list[tuple]:
    """Every place in the document a value sits (its containers too)."""
    found = [at] if at else []
    if isinstance(value, dict):
        for key, item in value.items():
            found += paths(item, (*at, key))
    elif isinstance(value, list):
        for n, item in enumerate(value):
            found += paths(item, (*at, n))
    return found


def replaced(document: Any, at: tuple, value: Any) -> Any:
    document = orjson.loads(orjson.dumps(document))
    target = document
    for step in at[:-1]:
        target = target[step]
    target[at[-1]] = value
    return document


def use(state_dir: Path) -> str:
    """Everything that reads the evidence, as the agent does; what the inventory concluded."""
    gpus = read_gpus(state_dir)  # the executor's reader: never raises
    assert isinstance(gpus, dict)
    died = {"type": "container.die", "time": NOW, "exit_code": 1, "container_id": "c" * 64}
    attrs = {"HostConfig": {"DeviceRequests": [{"Driver": "nvidia", "Count": -1}]}}
    cause(died, attrs, list, gpus, 300)
    evidence = gpu_evidence.Evidence(state_dir)
    if evidence.quarantined:
        assert not (state_dir / EVIDENCE_FILE).exists() and evidence.gpus == {}
        return "quarantined"
    probe = GpuProbe(health=HealthReader(XidLog(holds=Holds(3600, BOOT))))
    gpu_evidence.restore(evidence, probe, {}, {})
    for uuid in evidence.gpus:
        probe.health.stale(uuid, None, None)  # a verdict from what was restored
        probe.health.check_facts(uuid)
    gpu_evidence.gather(probe, {}, {})
    return "accepted"


def test_the_full_file_is_accepted_and_used(tmp_path):
    (tmp_path / EVIDENCE_FILE).write_bytes(orjson.dumps(full_file()))
    assert use(tmp_path) == "accepted"
    assert read_gpus(tmp_path)["GPU-a"]["xid"][0]["container_id"] == "c" * 64


def test_every_field_at_every_hostile_value_breaks_no_reader(tmp_path):
    document = full_file()
    outcomes: dict[str, int] = {"accepted": 0, "quarantined": 0}
    for at in paths(document):
        for value in HOSTILE:
            state_dir = tmp_path / f"case-{sum(outcomes.values())}"
            state_dir.mkdir()
            (state_dir / EVIDENCE_FILE).write_bytes(orjson.dumps(replaced(document, at, value)))
            outcomes[use(state_dir)] += 1
    print(f"mutated files: {outcomes}")
    assert outcomes["quarantined"] > 0 and sum(outcomes.values()) > 700


@pytest.mark.parametrize(
    ("at", "value"),
    [
        (("gpus", "GPU-a", "seen_at"), "x"),
        (("gpus", "GPU-a", "pci_bus_id"), 5),
        (("gpus", "GPU-a", "links_up"), ["0"]),
        (("gpus", "GPU-a", "xid"), {"code": 48}),
        (("gpus", "GPU-a", "xid", 0, "at"), 1e308),  # would fail the GPU forever
        (("gpus", "GPU-a", "xid", 0, "code"), "48"),
        (("unplaced", "0000:c3:00", 0, "seq"), -1),
        (("switches", "0000:c1:00", 0, "at"), 1e308),
        (("gpus", "GPU-a", "last_check", "counted"), "yes"),
        (("gpus", "GPU-a", "last_check", "at"), 1e308),  # a failed check that never ends
        (("gpus", "GPU-a", "last_check", "failed"), "memory"),
    ],
)
def test_the_wrong_fields_of_the_attack_are_quarantined_naming_the_field(tmp_path, at, value):
    (tmp_path / EVIDENCE_FILE).write_bytes(orjson.dumps(replaced(full_file(), at, value)))
    evidence = gpu_evidence.Evidence(tmp_path)
    assert evidence.quarantined is not None and evidence.gpus == {}
    assert str(at[-1]) in evidence.quarantined["error"], evidence.quarantined["error"]
    assert read_gpus(tmp_path) == {}  # moved aside: nothing there now


def test_a_fifo_a_link_a_directory_and_junk_in_its_place(tmp_path):
    target = tmp_path / "elsewhere.json"
    target.write_bytes(orjson.dumps(full_file()))
    makers = {
        "fifo": lambda p: os.mkfifo(p),
        "link": lambda p: p.symlink_to(target),
        "directory": lambda p: p.mkdir(),
        "huge": lambda p: p.write_bytes(b" " * (2 << 20)),
        "binary": lambda p: p.write_bytes(b"\xff\x00\x01" * 100),
        "deep": lambda p: p.write_bytes(b"[" * 5000 + b"]" * 5000),
    }
    for name, make in makers.items():
        state_dir = tmp_path / name
        state_dir.mkdir()
        make(state_dir / EVIDENCE_FILE)
        done = threading.Event()
        result: list[Any] = []

        def read(state_dir: Path = state_dir, result: list[Any] = result, done: threading.Event = done) -> None:
            result.append((read_gpus(state_dir), gpu_evidence.Evidence(state_dir).quarantined))
            done.set()

        threading.Thread(target=read, daemon=True).start()
        assert done.wait(5), f"{name}: a read hangs"
        gpus, quarantined = result[0]
        assert gpus == {} and quarantined is not None, name
    assert target.exists()  # a link is moved aside, never what it points to


def test_a_fifo_put_in_its_place_while_running_is_replaced_not_read(tmp_path):
    evidence = gpu_evidence.Evidence(tmp_path)
    assert evidence.save(full_file())
    path = tmp_path / EVIDENCE_FILE
    path.unlink()
    os.mkfifo(path)
    done = threading.Event()
    threading.Thread(
        target=lambda: (evidence.save({**full_file(), "kernel_cursor": None}), done.set()), daemon=True
    ).start()
    assert done.wait(5), "the save waits on a FIFO"
    assert path.is_file() and read_gpus(tmp_path)
