"""Loki stream labels. Few and stable (low cardinality); per-line detail such as unit and pid
goes into structured metadata instead.

System logs: {job, host, agent_id, container="node-<agent id>", level}. Container logs add
cluster, workload, source="container"|"capture", stream; Ray files source="ray-serve"|"ray", file=<kind>.
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
# Ray's own logs in session_*/logs: leading name -> `file` label (a fixed set, as above).
CORE_FILE_KINDS = (
    ("python-core-worker-", "core_worker"),
    ("python-core-driver-", "core_driver"),
    ("core-worker-", "core_worker"),
    ("worker-", "worker"),
    ("raylet", "raylet"),
    ("gcs_server", "gcs_server"),
    ("monitor", "monitor"),
    ("log_monitor", "log_monitor"),
    ("dashboard_agent", "dashboard_agent"),
    ("dashboard", "dashboard"),
    ("runtime_env_agent", "runtime_env_agent"),
)
LINE_LEVELS = (*LEVELS, "unknown")  # container and Ray lines: what shapes.py finds


def level_from_priority(value: object) -> str:
    if isinstance(value, str) and len(value) == 1 and "0" <= value <= "7":
        return LEVELS[int(value)]
    return DEFAULT_LEVEL


def file_kind(filename: str) -> str:
    """controller_123.log -> controller, replica_app_dep_x.log -> replica; anything not in
    FILE_KINDS -> other."""
    match = _FILE_KIND.match(filename.lower())
    return match.group(0) if match and match.group(0) in FILE_KINDS else "other"


def core_file_kind(filename: str) -> str | None:
    """raylet.out -> raylet, python-core-worker-ab12_412.log -> core_worker; None: not one of Ray's."""
    name = filename.lower()
    for start, kind in CORE_FILE_KINDS:
        if name.startswith(start):
            return kind
    return None


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

    def container(self, name: str, cluster: str | None, workload: str | None, stream: str) -> dict[str, Labels]:
        """The stream's label sets, one per line level."""
        return {
            level: _labels(
                **self.base,
                container=name,
                cluster=cluster,
                workload=workload,
                source="container",
                stream=stream,
                level=level,
            )
            for level in LINE_LEVELS
        }

    def capture(self, name: str, cluster: str | None, workload: str | None) -> Labels:
        """A capture's labels (sources/captures.py): its container's, source="capture", a warning."""
        where = {"container": name, "cluster": cluster, "workload": workload}
        return _labels(**self.base, **where, source="capture", level="warning")

    def ray_file(self, container: str, filename: str, core: bool = False) -> dict[str, Labels]:
        """A Ray file's label sets, one per line level: Serve's (core False) or Ray's own."""
        kind = (core_file_kind(filename) or "other") if core else file_kind(filename)
        source = "ray" if core else "ray-serve"
        return {
            level: _labels(**self.base, container=container, source=source, file=kind, level=level)
            for level in LINE_LEVELS
        }
