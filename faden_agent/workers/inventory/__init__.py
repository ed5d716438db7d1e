"""The inventory worker: what this machine is and has (docs/inventory.md).

    worker.py        the loop: interval, start, changes -> one record through Reports
    collector.py     the probes of this machine, run together
    probes.py        each probe in its own thread with a timeout; overrun, never piled up
    host.py          psutil facts: identity, OS, CPU, memory, addresses in effect
    disks.py         root, Docker's data root, state dir, configured paths; low-disk flag
    network.py       interfaces, addresses, MTU, speed
    docker_probe.py  engine, runtimes, images, managed containers and their GPUs
    gpu.py           NVML: driver and every GPU (needs nothing but pynvml and the stdlib)
    gpu_health.py    each GPU's health signals through NVML
    gpu_xids.py      the last NVML error events (Xid, ...) per GPU
    gpu_rules.py     the verdict table (ok / degraded / failed and the reasons)
    gpu_changes.py   gpu.health_changed events when a verdict changes
    changes.py       Docker events that call for a record now
    gpu_events.py    NVML error events (Xid, ECC, ...) into the Xid log, and a record now
    record.py        full / unchanged records, content hash, the receiver's rule
    traffic/         the `traffic` record (docs/protocol.md, "Traffic record"):
        sockdiag.py    TCP sockets from sock_diag netlink (filtered dump, destroy notifications)
        tcp.py         per-peer accounting: bytes each way, connections, RTT, retransmits
        nics.py        interface counters and speed
        infiniband.py  InfiniBand / RoCE port counters from sysfs
        nccl.py        the RDMA-idle-under-TCP-load warning
        peers.py       the cluster's peers, as the backend last sent them (peers.json)
        report.py      sample -> record when changed beyond thresholds

InventoryWorker is loaded on first use, so importing record.py (the reference backend
does) does not pull in the Docker SDK and pynvml.
"""

from typing import Any


def __getattr__(name: str) -> Any:
    if name == "InventoryWorker":
        from faden_agent.workers.inventory.worker import InventoryWorker

        return InventoryWorker
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = ["InventoryWorker"]
