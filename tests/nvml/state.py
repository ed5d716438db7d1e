"""The C-level GPU for tests: builds tests/nvml/fakenvml.c into a libnvidia-ml.so.1 with the
machine's compiler and writes the flat JSON state it answers from (replaced by a rename), and
the host's fabric manager, nvidia-smi and dcgmi as the stand-ins beside it read them. `GpuState`
holds them as dicts a test edits, then `write()`s (`read_back()` after a stand-in changed the
state); `env()` is what an agent needs to use them.
"""

from __future__ import annotations

import copy
import ctypes
import json
import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pynvml

SOURCE = Path(__file__).with_name("fakenvml.c")
SYSTEMCTL = Path(__file__).with_name("systemctl")  # answers `systemctl show nvidia-fabricmanager`
NVIDIA_SMI = Path(__file__).with_name("nvidia-smi")  # answers -pm and --gpu-reset
DCGMI = Path(__file__).with_name("dcgmi")  # answers `dcgmi diag -r LEVEL -i IDS -j`
STATE_VARIABLE = "FADEN_FAKE_NVML_STATE"
SYSTEMCTL_VARIABLE = "FADEN_FAKE_SYSTEMCTL_STATE"
SMI_VARIABLE = "FADEN_FAKE_SMI_STATE"
DCGMI_VARIABLE = "FADEN_FAKE_DCGMI_STATE"
GiB = 1024**3
ALL_XID_EVENTS = (
    pynvml.nvmlEventTypeXidCriticalError | pynvml.nvmlEventTypeDoubleBitEccError | pynvml.nvmlEventTypeSingleBitEccError
)


def build_library(directory: Path) -> Path:
    """DIR/libnvidia-ml.so.1, compiled from fakenvml.c (once per directory)."""
    directory.mkdir(parents=True, exist_ok=True)
    target = directory / "libnvidia-ml.so.1"
    if not target.exists():
        compiler = shutil.which("cc") or shutil.which("gcc")
        assert compiler, "no C compiler: the C-level NVML tests need cc"
        subprocess.run(
            [compiler, "-shared", "-fPIC", "-O2", "-Wall", "-Wextra", "-Werror"]
            + ["-Wl,-soname,libnvidia-ml.so.1", "-o", str(target), str(SOURCE), "-lpthread"],
            check=True,
            capture_output=True,
            timeout=120,
        )
    return target


def healthy_gpu(index: int) -> dict[str, Any]:
    """An H100 with every health signal readable and nothing wrong."""
    return {
        "uuid": f"GPU-{index:08x}-fake",
        "name": "NVIDIA H100 80GB HBM3",
        "bus_id": f"00000000:{0x17 + index:02X}:00.0",
        "minor": index,  # /dev/nvidia<minor>
        "memory_total": 80 * GiB,
        "memory_used": 2 * GiB,
        "cc_major": 9,
        "cc_minor": 0,
        "power_limit_mw": 700_000,
        "power_mw": 123_456,
        "temperature": 41,
        "memory_temperature": 45,
        "temp_threshold": {"shutdown": 92, "slowdown": 87, "memory_max": 95},
        "util_gpu": 37,
        "util_memory": 12,
        "mig_current": 0,
        "mig_pending": 0,
        "persistence": 1,
        "ecc_mode": 1,
        "ecc": {
            "corrected": {"volatile": 5, "aggregate": 50},
            "uncorrected": {"volatile": 0, "aggregate": 0},
        },
        "retired": {"sbe": 0, "dbe": 0, "pending": 0},
        "remap": {"correctable": 0, "uncorrectable": 0, "pending": 0, "failure": 0},
        "remap_histogram": {"max": 640, "high": 0, "partial": 0, "low": 0, "none": 0},
        "clocks_event_reasons": 0,
        "nvlink": {
            "links": 2,
            **{str(link): {"active": 1, "replay": 0, "recovery": 0, "crc_flit": 0, "crc_data": 0} for link in (0, 1)},
        },
        "pcie": {"replay": 0, "gen": 5, "gen_max": 5, "width": 16, "width_max": 16},
        "fabric": {"state": 3, "status": 0, "clique": 1},
        "recovery_action": 0,
        "events": ALL_XID_EVENTS,
    }


def flatten(value: Any, prefix: str = "") -> dict[str, int | str]:
    out: dict[str, int | str] = {}
    if isinstance(value, dict):
        for key, item in value.items():
            out.update(flatten(item, f"{prefix}{key}."))
        return out
    assert isinstance(value, int | str) and not isinstance(value, bool), f"{prefix}: {value!r}"
    out[prefix[:-1]] = value
    return out


class GpuState:
    """The GPUs the C library reports. Edit `gpus`/`top`, then write()."""

    def __init__(self, directory: Path, count: int = 2):
        self.directory = directory
        self.library = build_library(directory / "lib")
        self.path = directory / "nvml-state.json"
        self.gpus = [healthy_gpu(i) for i in range(count)]
        self.top: dict[str, Any] = {
            "driver_version": "550.54.15",
            "cuda_version": 12040,
            "nvml_version": "12.550.54.15",
        }
        self.events: list[dict[str, int]] = []
        # the host's nvidia-fabricmanager unit, as systemctl shows it (LoadState "not-found": none)
        self.fabric_manager: dict[str, str] = {
            "LoadState": "loaded",
            "ActiveState": "active",
            "SubState": "running",
            "version": self.top["driver_version"],
        }
        self.systemctl_path = directory / "systemctl-state"
        self.smi: dict[str, Any] = {}  # the nvidia-smi stand-in's scenario (tests/nvml/nvidia-smi)
        self.dcgmi: dict[str, Any] = {}  # the dcgmi stand-in's scenario (tests/nvml/dcgmi)
        self.smi_path = directory / "smi-state.json"
        self.dcgmi_path = directory / "dcgmi-state.json"
        self.write()

    def env(self, dcgm: bool = False) -> dict[str, str]:
        """With `dcgm`, DCGM is installed (the dcgmi stand-in); else the agent finds no dcgmi."""
        return {
            "LD_LIBRARY_PATH": str(self.library.parent),
            STATE_VARIABLE: str(self.path),
            "FADEN_NODE_AGENT_SYSTEMCTL": str(SYSTEMCTL),
            SYSTEMCTL_VARIABLE: str(self.systemctl_path),
            "FADEN_NODE_AGENT_NVIDIA_SMI": str(NVIDIA_SMI),
            SMI_VARIABLE: str(self.smi_path),
            "FADEN_NODE_AGENT_DCGMI": str(DCGMI) if dcgm else str(self.directory / "no-dcgm" / "dcgmi"),
            DCGMI_VARIABLE: str(self.dcgmi_path),
        }

    def flat(self) -> dict[str, int | str]:
        state: dict[str, Any] = {**copy.deepcopy(self.top), "count": self.top.get("count", len(self.gpus))}
        state["gpu"] = {str(i): g for i, g in enumerate(self.gpus)}
        state["events"] = len(self.events)
        state["event"] = {str(n): e for n, e in enumerate(self.events)}
        return flatten(state)

    def write(self) -> None:
        temporary = self.path.with_suffix(".tmp")
        temporary.write_text(json.dumps(self.flat()))
        os.replace(temporary, self.path)
        manager = self.systemctl_path.with_suffix(".tmp")
        manager.write_text("".join(f"{key}={value}\n" for key, value in self.fabric_manager.items()))
        os.replace(manager, self.systemctl_path)
        for scenario, path in ((self.smi, self.smi_path), (self.dcgmi, self.dcgmi_path)):
            path.with_suffix(".tmp").write_text(json.dumps(scenario))
            os.replace(path.with_suffix(".tmp"), path)

    def read_back(self) -> None:
        """Takes the state file as a stand-in left it (nvidia-smi's reset, its -pm) into `gpus`."""
        flat = json.loads(self.path.read_text())
        nested: dict[str, Any] = {}
        for key, value in flat.items():
            node = nested
            *path, last = key.split(".")
            for part in path:
                node = node.setdefault(part, {})
            node[last] = value
        self.gpus = [nested["gpu"][str(i)] for i in range(len(self.gpus))]

    def clients(self) -> list[int]:
        """The pids the C library says hold NVML now (tests/nvml/fakenvml.c)."""
        folder = Path(f"{self.path}.clients")
        return sorted(int(p.name) for p in folder.iterdir()) if folder.exists() else []

    def load(self, state: dict[str, Any]) -> None:
        """Takes a recorded state (bench/gpu_probe.py --fixture: a real device's values)."""
        self.top = {k: v for k, v in state.items() if k != "gpu"}
        self.gpus = [state["gpu"][str(i)] for i in range(len(state["gpu"]))]
        self.write()

    def xid(self, gpu: int, code: int) -> None:
        """An Xid error on that GPU, as NVML's event set delivers it."""
        self.event(gpu, pynvml.nvmlEventTypeXidCriticalError, code)

    def event(self, gpu: int, event_type: int, data: int = 0) -> None:
        self.events.append({"gpu": gpu, "type": event_type, "data": data})
        self.write()

    def double_bit_error(self, gpu: int) -> None:
        """What a real double-bit ECC error shows: the volatile and aggregate uncorrected counts
        rise, then Xid 48 (NVML's critical Xid event) and the double-bit ECC event."""
        ecc = self.gpus[gpu]["ecc"]["uncorrected"]
        ecc["volatile"] += 1
        ecc["aggregate"] += 1
        self.events.append({"gpu": gpu, "type": pynvml.nvmlEventTypeXidCriticalError, "data": 48})
        self.event(gpu, pynvml.nvmlEventTypeDoubleBitEccError)

    def reset(self, gpu: int) -> None:
        """What NVML shows of the GPU after `nvidia-smi -r`: its volatile ECC counts start
        again from zero, a pending page retirement or row remap is done, the driver no longer
        asks for a reset (the aggregate counts stay: they are the board's lifetime)."""
        state = self.gpus[gpu]
        for kind in ("corrected", "uncorrected"):
            state["ecc"][kind]["volatile"] = 0
        state["retired"]["pending"] = 0
        state["remap"]["pending"] = 0
        state["recovery_action"] = 0
        self.write()


def load_in_process(state: GpuState) -> None:
    """Makes this process's pynvml find the C library (LD_LIBRARY_PATH is read at start
    only: a library already loaded under its soname is what dlopen returns)."""
    os.environ[STATE_VARIABLE] = str(state.path)
    ctypes.CDLL(str(state.library), mode=ctypes.RTLD_GLOBAL)
