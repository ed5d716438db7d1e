"""GPU health read cost: CPU per round of 8 GPUs with the health read vs the plain read, and
with GPM's activity figures (gpu/gpm.py: two samples a GPU a round) vs GPUs without GPM;
the kernel line source's idle CPU (its journalctl and thread, over --idle-s seconds), and
each consumer's CPU per kernel line (the Xid reader, the node conditions' reader).

    python3 bench/gpu_health_bench.py [--gpus 8] [--rounds 200] [--idle-s 10] [--lines 20000]
                                      [--json OUT.json]

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
from faden_agent.config import load_config
from faden_agent.workers.inventory.conditions.evaluate import kernel_holds
from faden_agent.workers.inventory.conditions.kernel import KernelConditions
from faden_agent.workers.inventory.gpu.health import HealthReader
from faden_agent.workers.inventory.gpu.holds import read_boot_id
from faden_agent.workers.inventory.gpu.kernel_xids import KernelXids
from faden_agent.workers.inventory.gpu.probe import GpuProbe
from faden_agent.workers.inventory.gpu.xids import XidLog
from faden_agent.workers.inventory.kernel.lines import JOURNALD, KernelLine, KernelLines
from tests.nvml.gpm import with_gpm
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


def set_gpm(state: GpuState, on: bool) -> None:
    for gpu in state.gpus:
        if on:
            with_gpm(gpu, sm_active=61.5, sm_occupancy=30, tensor_active=12.5, dram_active=44)
        else:
            gpu.pop("gpm", None)
    state.write()


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
        set_gpm(state, True)  # Hopper's: GPM's figures read every round
        gpm = cpu_per_round(GpuProbe(pynvml, HealthReader()), rounds)
        gpm_calls = calls_per_round(HealthReader(), pynvml)
        set_gpm(state, False)
        full_again = cpu_per_round(GpuProbe(pynvml, HealthReader()), rounds)  # drift check
    plain_ms = statistics.median(plain + plain_again) * 1000
    full_ms = statistics.median(full + full_again) * 1000
    gpm_ms = statistics.median(gpm) * 1000
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
        "nvml_calls_per_round": {"plain": plain_calls, "with_health": full_calls, "with_gpm": gpm_calls},
        "target_health_cpu_ms_per_round": 5.0,
        "without_gpm_cpu_ms_per_round": round(full_ms, 3),
        "with_gpm_cpu_ms_per_round": round(gpm_ms, 3),
        "gpm_cpu_ms_per_gpu": round((gpm_ms - full_ms) / gpus, 3),
        "without_gpm_first_vs_last_median_ms": [
            round(statistics.median(full) * 1000, 3),
            round(statistics.median(full_again) * 1000, 3),
        ],
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
        source.add(conditions_reader(journal.boot_id))
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


def conditions_reader(boot_id: str | None) -> KernelConditions:
    holds = kernel_holds(load_config({"FADEN_NODE_AGENT_STATE_PATH": "/nonexistent/state.json"}))
    return KernelConditions(boot_id, holds, lambda: None)


# a kernel log as a busy GPU machine writes it: most lines carry nothing for either consumer
KERNEL_MIX = (
    "usb 1-1: new high-speed USB device number 2 using xhci_hcd",
    "eth0: renamed from veth1a2b3c4",
    "docker0: port 3(veth9f8e7d6) entered forwarding state",
    "EXT4-fs (nvme0n1p2): mounted filesystem with ordered data mode. Quota mode: none.",
    'audit: type=1400 audit(1700000000.000:42): apparmor="STATUS" operation="profile_load"',
    "nvidia-nvlink: Nvlink Core is being initialized, major device number 239",
    "NVRM: Xid (PCI:0000:17:00): 13, pid=1234, name=python3, Graphics Exception: ESR 0x405840=0x0",
    "INFO: task python3:4242 blocked for more than 120 seconds.",
    "Memory cgroup out of memory: Killed process 9306 (tail) total-vm:34288kB, anon-rss:32128kB",
    "mce: [Hardware Error]: Machine check events logged",
)


def consumer_cpu_per_line(lines: int) -> dict[str, Any]:
    """Thread CPU per kernel line handed to each consumer, over `lines` lines of KERNEL_MIX."""
    mix = [KernelLine(KERNEL_MIX[n % len(KERNEL_MIX)], time.time(), None, JOURNALD, 3) for n in range(lines)]
    out: dict[str, Any] = {"kernel_lines_handed": lines}
    for name, consumer in (
        ("xids", KernelXids(XidLog(), lambda key: "GPU-a", lambda: None, container_of=lambda pid: None)),
        ("node_conditions", conditions_reader(None)),
    ):
        best = float("inf")
        for _ in range(3):
            started = time.thread_time()
            for line in mix:
                consumer.take(line)
            best = min(best, time.thread_time() - started)
        out[f"consumer_{name}_cpu_us_per_line"] = round(best * 1e6 / lines, 2)
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gpus", type=int, default=8)
    parser.add_argument("--rounds", type=int, default=200)
    parser.add_argument("--idle-s", type=float, default=10.0)
    parser.add_argument("--lines", type=int, default=20000)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    figures = {**measure(args.gpus, args.rounds), **kernel_log_idle(args.idle_s)}
    emit({**figures, **consumer_cpu_per_line(args.lines)}, args.json)
    return 0


if __name__ == "__main__":
    sys.exit(main())
