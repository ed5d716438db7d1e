"""Events from the log worker to the backend (through Reports: the durable outbox, backend/outbox.py)."""

from __future__ import annotations

import logging
from typing import Any

from faden_agent import protocol
from faden_agent.config import Config

log = logging.getLogger(__name__)


def report_event(config: Config, data: dict[str, Any], record_id: str | None = None) -> bool:
    """Put one event into the outbox (rare: opened and closed per event); False when that failed."""
    try:
        from faden_agent.backend.producer import Reports

        reports = Reports(config)
        try:
            reports.put(protocol.EVENT, data, record_id=record_id)
        finally:
            reports.close()
    except Exception as exc:  # noqa: BLE001 - reporting must never stop a reader
        log.warning("logs: could not report a %s event (%s)", data.get("type"), str(exc)[:200])
        return False
    return True
