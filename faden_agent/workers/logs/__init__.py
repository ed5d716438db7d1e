"""The log shipper: journald, managed containers' logs and Ray Serve files to Loki (docs/logs.md)."""

from faden_agent.workers.logs.worker import LogsWorker

__all__ = ["LogsWorker"]
