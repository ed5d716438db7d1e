"""Inventory worker (skeleton): issue 5 brings host, Docker and GPU probes."""

from faden_agent.workers.base import Worker


class InventoryWorker(Worker):
    name = "inventory"
