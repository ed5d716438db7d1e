"""Loki stream labels. Few and stable (low cardinality); per-line detail such as unit and pid
goes into structured metadata instead.
Notes (why, figures, history): docs/design-notes.md.
"""

from __future__ import annotations

import re

from faden_agent.config import Config
from faden_agent.workers.logs.entry import Labels

JOB = "node-agent"
# journald PRIORITY 0..7 -> level label.
LEVELS = ("emerg", "alert", "crit", "error", "warning", "notice", "info", "debug")
DEFAULT_LEVEL = "info"  # entries without a valid PRIORITY (syslog's default severity)

_FILE_KIND = re.compile(r"[a-z]+")
# The `file` label of Ray Serve files: a fixed set, because file names are written by the
# container (a label value per random name would flood Loki's index).
FILE_KINDS = frozenset({"controller", "proxy", "http", "replica", "deployment", "autoscaler"})


def level_from_priority(value: object) -> str:
    if isinstance(value, str) and len(value) == 1 and "0" <= value <= "7":
        return LEVELS[int(value)]
    return DEFAULT_LEVEL


def file_kind(filename: str) -> str:
    """controller_123.log -> controller, replica_app_dep_x.log -> replica; anything not in
    FILE_KINDS -> other."""
    match = _FILE_KIND.match(filename.lower())
    return match.group(0) if match and match.group(0) in FILE_KINDS else "other"


def _labels(**values: str | None) -> Labels:
    return tuple(sorted((k, v) for k, v in values.items() if v))  # Loki drops empty values


class LabelMaker:
    def __init__(self, config: Config):
        self.base = {"job": JOB, "host": config.advertise_host, "agent_id": config.agent_id}
        self._system = {
            level: _labels(**self.base, container=f"node-{config.agent_id}", level=level) for level in LEVELS
        }

    def system(self, level: str) -> Labels:
        return self._system[level]

    def container(self, name: str, cluster: str | None, workload: str | None, stream: str) -> Labels:
        return _labels(
            **self.base, container=name, cluster=cluster, workload=workload, source="container", stream=stream
        )

    def ray_file(self, container: str, filename: str) -> Labels:
        return _labels(**self.base, container=container, source="ray-serve", file=file_kind(filename))
