"""The workers the supervisor forks, by name -> "module:Class" (imported only in the child).
Every worker's class is in its package's worker.py."""

WORKERS: dict[str, str] = {
    "stream": "faden_agent.workers.stream.worker:StreamWorker",
    "executor": "faden_agent.workers.executor.worker:ExecutorWorker",
    "inventory": "faden_agent.workers.inventory.worker:InventoryWorker",
    "logs": "faden_agent.workers.logs.worker:LogsWorker",
    "peer": "faden_agent.workers.peer.worker:PeerWorker",  # serves images to peer machines
}
