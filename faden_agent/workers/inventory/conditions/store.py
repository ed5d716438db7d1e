"""What the node conditions keep across restarts (node-conditions.json in the state directory):
each condition's state and each rule's memory (ports and links seen up, counter baselines).
Written atomically (0600) only when it changed, at most MAX_BYTES; a corrupt file is moved aside,
reported and started afresh; a file that cannot be written (a read-only disk) is tried next round."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import orjson

from faden_agent.disk.files import load_kept, replace_file_if_changed

FILE = "node-conditions.json"
VERSION = 1
MAX_BYTES = 256 * 1024
log = logging.getLogger(__name__)


class ConditionStore:
    def __init__(self, state_dir: Path, read_only: bool = False):
        """read_only (doctor): a corrupt file is left where it is, for the agent to report."""
        self.path = Path(state_dir) / FILE
        self.read_only = read_only
        self.quarantined: dict[str, Any] | None = None  # the event when a corrupt file was moved aside
        self.states: dict[str, dict[str, Any]] = {}
        self.memory: dict[str, dict[str, Any]] = {}
        self.problem: str | None = None  # the last write's failure, until one succeeds
        self._load()

    def _load(self) -> None:
        data, self.quarantined = load_kept(self.path, MAX_BYTES, problem, "node conditions", self.read_only)
        if data is not None:
            self.states, self.memory = data["states"], data["memory"]

    def save(self) -> bool:
        """Writes the file when it differs; True when written (never by a read-only store)."""
        if self.read_only:
            return False
        data = orjson.dumps(
            {"version": VERSION, "states": self.states, "memory": self.memory}, option=orjson.OPT_SORT_KEYS
        )
        if len(data) > MAX_BYTES:
            self.memory = {}  # bounded by the rules; past the bound the memories start afresh
            return self.save()
        try:
            written = replace_file_if_changed(self.path, data)
        except OSError as exc:
            if self.problem is None:
                log.warning("node conditions not saved (%s); tried again each round", exc.strerror or exc)
            self.problem = exc.strerror or str(exc)
            return False
        self.problem = None
        return written


def problem(data: Any) -> str | None:
    """What makes `data` no file this agent wrote; None when it is one."""
    if not isinstance(data, dict) or data.get("version") != VERSION:
        return "not a version-1 node conditions object"
    states, memory = data.get("states"), data.get("memory")
    if not isinstance(states, dict) or not isinstance(memory, dict):
        return "states or memory is not an object"
    for name, state in states.items():
        if not isinstance(state, dict) or not isinstance(state.get("since"), int | float):
            return f"condition {name[:64]!r} has no since"
        if state.get("active") not in (True, False, None) or not isinstance(state.get("reason"), str | None):
            return f"condition {name[:64]!r}: active or reason of the wrong type"
    if not all(isinstance(kept, dict) for kept in memory.values()):
        return "a rule's memory is not an object"
    return None
