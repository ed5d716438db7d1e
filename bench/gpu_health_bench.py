"""GPU health read cost: CPU per round of 8 GPUs with the health read vs the plain read;
the kernel line source's idle CPU (its journalctl and thread, over --idle-s seconds).

    python3 bench/gpu_health_bench.py [--gpus 8] [--rounds 200] [--idle-s 10] [--json OUT.json]

Same run, real pynvml, the tests' C libnvidia-ml.so.1 (built with cc); this thread's CPU.
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.output import emit
from faden_agent.workers.inventory.gpu.health import HealthReader
from faden_agent.workers.inventory.gpu.holds import read_boot_id
from faden_agent.workers.inventory.gpu.kernel_xids import KernelXids
from faden_agent.workers.inventory.gpu.probe import GpuProbe
from faden_agent.workers.inventory.gpu.xids import XidLog
from faden_agent.workers.inventory.kernel.lines import KernelLines
from tests.nvml.state import GpuState, load_in_process
from tests.support.journalfiles import JournalWriter


class PlainReader(HealthReader):
    """The inventory read as it was before health: no health call at all."""

    def read(self, nvml: Any, handle: Any, uuid: str, optional: Any, temperature: int | None = None) -> dict[str, Any]:
        return {"verdict": "ok", "reasons": []}


class CountingNvml:
    """pynvml with a count of the calls into the library (one extra round only)."""

    def __init__(self, nvml: Any):
        self._nvml = nvml
        self.calls = 0

    def __getattr__(self, name: str) -> Any:
        target = getattr(self._nvml, name)
        if not (callable(target) and name.startswith("nvml") and not name.startswith("nvmlEventType")):
            return target

        def counted(*args: Any, **kwargs: Any) -> Any:
            self.calls += 1
            return target(*args, **kwargs)

        return counted


def cpu_per_round(probe: GpuProbe, rounds: int) -> list[float]:
    probe()  # warm-up: nvmlInit, the PCIe maxima and per-link counters read once
    spent = []
    for _ in range(rounds):
        started = time.thread_time()
        probe()
        spent.append(time.thread_time() - started)
    return spent


def calls_per_round(reader: HealthReader, pynvml: Any) -> int:
    counting = CountingNvml(pynvml)
    probe = GpuProbe(counting, reader)
    probe()
    counting.calls = 0
    probe()
    return counting.calls


def measure(gpus: int, rounds: int) -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as tmp:
        state = GpuState(Path(tmp), count=gpus)
        for index in range(gpus):  # a realistic board: 18 NVLink links, some counters
            state.gpus[index]["nvlink"] = {
                "links": 18,
                **{
                    str(link): {"active": 1, "replay": 0, "recovery": 0, "crc_flit": link, "crc_data": 0}
                    for link in range(18)
                },
            }
            state.gpus[index]["compute"] = {"count": 1, "0": {"pid": 1, "used": 1 << 30}}
        state.write()
        load_in_process(state)
        import pynvml

        plain = cpu_per_round(GpuProbe(pynvml, PlainReader()), rounds)
        full = cpu_per_round(GpuProbe(pynvml, HealthReader()), rounds)
        plain_again = cpu_per_round(GpuProbe(pynvml, PlainReader()), rounds)  # drift check
        plain_calls = calls_per_round(PlainReader(), pynvml)
        full_calls = calls_per_round(HealthReader(), pynvml)
    plain_ms = statistics.median(plain + plain_again) * 1000
    full_ms = statistics.median(full) * 1000
    return {
        "gpus": gpus,
        "rounds": rounds,
        "plain_read_cpu_ms_per_round": round(plain_ms, 3),
        "with_health_cpu_ms_per_round": round(full_ms, 3),
        "health_cpu_ms_per_round": round(full_ms - plain_ms, 3),
        "health_cpu_ms_per_gpu": round((full_ms - plain_ms) / gpus, 3),
        "plain_first_vs_last_median_ms": [
            round(statistics.median(plain) * 1000, 3),
            round(statistics.median(plain_again) * 1000, 3),
        ],
        "nvml_calls_per_round": {"plain": plain_calls, "with_health": full_calls},
        "target_health_cpu_ms_per_round": 5.0,
    }


def process_cpu_s(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as fh:
        fields = fh.read().rpartition(")")[2].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")  # utime + stime


def own_cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def kernel_log_idle(idle_s: float) -> dict[str, Any]:
    """The kernel line source following a real journal file (systemd-journal-remote) that
    holds 1000 kernel lines, then idle: CPU of its journalctl and of this process (whose
    main thread only sleeps) per second, against this process sleeping without it."""
    with tempfile.TemporaryDirectory() as tmp:
        journal = JournalWriter(Path(tmp) / "journal")
        journal.boot_id = read_boot_id() or journal.boot_id
        journal.append(
            [journal.entry(f"usb 1-{n}: new device", 6, _TRANSPORT="kernel") for n in range(999)]
            + [journal.entry("NVRM: Xid (PCI:0000:17:00): 13, pid=1, Graphics Exception", 3, _TRANSPORT="kernel")]
        )
        before = own_cpu_s()
        time.sleep(idle_s)
        baseline = own_cpu_s() - before
        source = KernelLines(threading.Event(), journal.boot_id, journal_directory=journal.directory)
        reader = KernelXids(XidLog(), lambda key: "GPU-a", lambda: None)
        source.add(reader)
        thread = threading.Thread(target=source.run, daemon=True)
        started = time.monotonic()
        thread.start()
        while reader.read < 1 and time.monotonic() - started < 30:  # the backlog is read
            time.sleep(0.05)
        catch_up_s = time.monotonic() - started
        time.sleep(1.0)  # settled
        proc = source._proc  # noqa: SLF001 - the bench measures the journalctl the source runs
        assert proc is not None
        journalctl_before, own_before = process_cpu_s(proc.pid), own_cpu_s()
        time.sleep(idle_s)
        journalctl_cpu = process_cpu_s(proc.pid) - journalctl_before
        own_cpu = own_cpu_s() - own_before
        source.stop()
        thread.join(5)
    return {
        "kernel_log_catch_up_s_1000_lines": round(catch_up_s, 3),
        "kernel_log_idle_s": idle_s,
        "kernel_log_idle_journalctl_cpu_ms_per_s": round(journalctl_cpu * 1000 / idle_s, 3),
        "kernel_log_idle_reader_cpu_ms_per_s": round(max(0.0, own_cpu - baseline) * 1000 / idle_s, 3),
        "sleeping_process_cpu_ms_per_s": round(baseline * 1000 / idle_s, 3),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gpus", type=int, default=8)
    parser.add_argument("--rounds", type=int, default=200)
    parser.add_argument("--idle-s", type=float, default=10.0)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    emit({**measure(args.gpus, args.rounds), **kernel_log_idle(args.idle_s)}, args.json)
    return 0


if __name__ == "__main__":
    sys.exit(main())
