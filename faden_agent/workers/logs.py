"""Log shipper worker (skeleton): issue 6 brings journald, container and Ray Serve logs."""

from faden_agent.workers.base import Worker


class LogsWorker(Worker):
    name = "logs"
