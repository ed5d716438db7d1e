"""The inventory worker: what this machine is and has (docs/inventory.md).

    worker.py        the loop: interval, start, changes -> one record through Uplink
    collector.py     the probes of this machine, run together
    probes.py        each probe in its own thread with a timeout; overrun, never piled up
    host.py          psutil facts: identity, OS, CPU, memory, addresses in effect
    disks.py         root, Docker's data root, state dir, configured paths; low-disk flag
    network.py       interfaces, addresses, MTU, speed
    docker_probe.py  engine, runtimes, images, managed containers and their GPUs
    gpu.py           NVML: driver and every GPU (needs nothing but pynvml)
    changes.py       Docker events that call for a record now
    gpu_events.py    NVML error events (critical Xid, double-bit ECC) that do the same
    record.py        full / unchanged records, content hash, the receiver's rule

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
