"""Entries under the Ray log directory that are refused (hostile or broken: a symlink, a
FIFO, a bad name, too many files): each counted and reported once, never followed; memory
bounded however many a container makes."""

from __future__ import annotations

import hashlib
import logging
from typing import TYPE_CHECKING

from faden_agent.config import Config
from faden_agent.workers.logs.report import report_event
from faden_agent.workers.logs.sources.ray.mount import safe_name

if TYPE_CHECKING:
    from faden_agent.protocol.status import RefusalsStatus

MAX_REFUSED_TRACKED = 10_000  # refused entries remembered (to report each once); beyond: counted as overflow
MAX_REFUSED_EVENTS_PER_CONTAINER = 20  # events per container; the counters go on counting
log = logging.getLogger(__name__)


class Refusals:
    def __init__(self, config: Config):
        self.config = config
        self.refused: dict[str, int] = {}  # reason -> distinct entries refused
        self.refused_seen: set[tuple[str, str]] = set()  # (relative path, reason) reported already
        self.refused_events: dict[str, int] = {}  # container -> events sent

    def refuse(self, parts: tuple[str, ...], reason: str) -> None:
        """Count and report a hostile (or broken) entry once; it is never followed."""
        key = ("/".join(parts), reason)
        if key in self.refused_seen:
            return
        if len(self.refused_seen) >= MAX_REFUSED_TRACKED:
            self.refused["overflow"] = 1  # stop remembering: memory stays bounded
            return
        self.refused_seen.add(key)
        self.refused[reason] = self.refused.get(reason, 0) + 1
        container = safe_name(parts[0])
        shown = repr("/".join(parts))[:200]
        log.warning("logs: refused %s under the Ray log directory (%s): not followed, not read", shown, reason)
        sent = self.refused_events.get(container, 0)
        if sent < MAX_REFUSED_EVENTS_PER_CONTAINER:
            self.refused_events[container] = sent + 1
            digest = hashlib.sha256(f"{key[0]}\0{reason}".encode("utf-8", "surrogateescape")).hexdigest()[:16]
            report_event(
                self.config,
                {
                    "type": "logs.entry_refused",
                    "container": container,
                    "path": shown,
                    "reason": reason,
                    "message": f"a log file entry of container {container} was refused ({reason}): {shown}",
                },
                record_id=f"logs-refused:{digest}",
            )

    def status(self) -> RefusalsStatus:
        return {
            "refused": dict(self.refused),
            "refused_total": sum(n for reason, n in self.refused.items() if reason != "overflow"),
        }
