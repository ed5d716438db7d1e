"""The executor worker: node commands against the Docker engine, and Docker events.

journal.py     the on-disk command journal (exactly-once effect, resume after a crash)
specs.py       validation of each command kind's spec
scheduler.py   per-container order, parallelism, bounded pulls, cancellation flags
kinds.py       the CommandKind record and the registry
commands/      every command kind, one module per family (container.py, image.py, ...)
docker_ops.py  the Docker SDK calls, bounded, errors -> reasons
gpu.py         `gpus` -> NVIDIA device requests; gpu_runtime_missing detection
timeline.py    timeline records with deterministic ids
events.py      Docker events of managed containers -> event records
adoption.py    on start: report the managed containers
worker.py      the loop
"""

from faden_agent.workers.executor.worker import ExecutorWorker

__all__ = ["ExecutorWorker"]
