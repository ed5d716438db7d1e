"""The probes of one machine, run together: `Collector(config).collect()` -> sections."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from faden_agent.config import Config
from faden_agent.disk.disklow import low_threshold
from faden_agent.engine.client import EngineClient
from faden_agent.node.topology import topology
from faden_agent.workers.inventory import docker_probe
from faden_agent.workers.inventory.disks import probe_disks
from faden_agent.workers.inventory.gpu.containers import add_container_gpu_use
from faden_agent.workers.inventory.gpu.health import HealthReader
from faden_agent.workers.inventory.gpu.probe import GpuProbe
from faden_agent.workers.inventory.gpu.xids import XidLog
from faden_agent.workers.inventory.host import probe_host
from faden_agent.workers.inventory.network import probe_network
from faden_agent.workers.inventory.probes import OK, OVERRUN, Probe, run_probes
from faden_agent.workers.inventory.record import sections_from


class DockerProbe:
    """The engine probe with one reused client (its negotiated version kept), made again
    after a failure. Each round runs on a new thread and a connection belongs to the thread
    that opened it, so the round's connection is closed when the round ends."""

    def __init__(self, docker_host: str | None):
        self.docker_host = docker_host
        self._client: EngineClient | None = None

    def __call__(self) -> dict[str, Any]:
        try:
            if self._client is None:
                self._client = EngineClient(self.docker_host, timeout_s=docker_probe.CLIENT_TIMEOUT_S)
            return docker_probe.probe_docker(self._client)
        except Exception:
            client, self._client = self._client, None
            if client is not None:
                client.close()  # its connection may be the stuck one: do not keep it
            raise
        finally:
            if self._client is not None:
                self._client.close()  # no later request comes from this thread


GPU_ROUND_CALLS = 3  # the GPU round as a whole may take this many per-call bounds


class Collector:
    def __init__(
        self,
        config: Config,
        nvml: Any = None,
        timeout_s: float | None = None,
        xids: XidLog | None = None,
        gpu_notes: Callable[[dict[str, Any]], list[tuple[str, str]]] | None = None,
    ):
        """Each probe is bounded by INVENTORY_PROBE_TIMEOUT_SEC; the GPU probe's every NVML call
        by it (a round of a few hundred calls: GPU_ROUND_CALLS times it in all)."""
        self.config = config
        timeout = timeout_s or config.inventory_probe_timeout_sec
        self.last_good: dict[str, Any] = {}
        health = HealthReader(xids, config.gpu_throttle_sec, config.gpu_rising_sec, config.gpu_xid_hold_sec)
        self.gpu = GpuProbe(nvml, health, notes=gpu_notes)
        self.probes = [
            Probe("host", lambda: probe_host(config), timeout),
            Probe("disks", lambda: self.probe_disks(config), timeout),
            Probe("network", probe_network, timeout),
            Probe("docker", DockerProbe(config.docker_host), timeout),
            Probe("gpu", self.gpu, GPU_ROUND_CALLS * timeout, self.gpu.call_age, timeout),
        ]
        self.timeouts = {p.name: p.timeout_s for p in self.probes}

    def probe_disks(self, config: Config) -> list[dict[str, Any]]:
        return probe_disks(
            config.state_dir,
            config.disk_paths,
            self.docker_root(),
            lambda total: low_threshold(total, config),
            config.ray_log_dir,
        )

    def docker_root(self) -> str | None:
        """Docker's data root as the engine last reported it (None: the default)."""
        return (self.last_good.get("docker") or {}).get("data_root")

    def probe(self, name: str) -> Probe:
        return next(p for p in self.probes if p.name == name)

    def collect(self) -> dict[str, Any]:
        root_before = self.docker_root()
        results = run_probes(self.probes)
        sections = sections_from(results, self.last_good, self.timeouts)
        if self.docker_root() != root_before and results["disks"].status == OK:
            # The engine named a data root the disks probe, running beside it, did not know
            # yet (the first round, or a moved root): measure again with it, or this record
            # holds the old root and the next round sends a second full one.
            results["disks"] = run_probes([self.probe("disks")])["disks"]
            sections = sections_from(results, self.last_good, self.timeouts)
        add_container_gpu_use(sections)
        gpu = results.get("gpu")  # absent where a caller runs only some probes
        if gpu is not None and gpu.status == OVERRUN:  # a hung NVML call is a verdict, not just stale data
            sections["gpu"] = self.gpu.hung(self.last_good.get("gpu"))
        sections["labels"] = dict(self.config.labels)
        sections["topology"] = topology(self.config.sysfs_root, nvml_gpus(sections.get("gpu")))
        return sections

    def gpu_round(self) -> dict[str, Any] | None:
        """The GPU probe alone (between full rounds): its section, the hung one while a call
        hangs; None when it failed."""
        probe = self.probe("gpu")
        result = run_probes([probe])["gpu"]
        if result.status == OVERRUN:
            return self.gpu.hung(self.last_good.get("gpu"))
        return result.data if result.status == OK else None

    def overrun(self) -> list[str]:
        return [p.name for p in self.probes if p.overrun()]


def nvml_gpus(gpu: Any) -> list[dict[str, Any]] | None:
    """What NVML said of each GPU, for the topology; None without NVML (sysfs finds them)."""
    if not isinstance(gpu, dict) or not gpu.get("available"):
        return None
    out = []
    for device in gpu.get("devices") or []:
        if not isinstance(device, dict):
            continue
        fabric = (device.get("health") or {}).get("fabric") or {}
        if fabric.get("state") != "completed" or fabric.get("status"):
            fabric = {}  # NVML names a clique and a cluster only once the GPU's registration completed
        out.append(
            {
                "index": device.get("index"),
                "uuid": device.get("uuid"),
                "pci_bus_id": device.get("pci_bus_id"),
                "nvlink_clique": fabric.get("clique_id"),
                "fabric_cluster": fabric.get("cluster_uuid"),
            }
        )
    return out
