"""Inventory worker package: host, disks, network, Docker and GPU probes (see worker.py)."""

from faden_agent.workers.inventory.worker import InventoryWorker

__all__ = ["InventoryWorker"]
