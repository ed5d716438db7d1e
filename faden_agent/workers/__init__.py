"""The workers the supervisor forks, by name -> "module:Class" (imported only in the child)."""

WORKERS: dict[str, str] = {
    "stream": "faden_agent.workers.stream:StreamWorker",
    "executor": "faden_agent.workers.executor:ExecutorWorker",
    "inventory": "faden_agent.workers.inventory:InventoryWorker",
    "logs": "faden_agent.workers.logs:LogsWorker",
    "peer": "faden_agent.workers.peer:PeerWorker",  # serves images to peer machines (issue 14)
}
