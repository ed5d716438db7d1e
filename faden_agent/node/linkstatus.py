"""The backend link's status file (state_dir/status.json, 0600): LinkStatus writes it for the
stream worker, read_link_status reads it for `faden-agent status` while no agent runs."""

from __future__ import annotations

import logging
import os
import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any, Unpack, cast

import orjson

from faden_agent.common.redact import redact_text, redact_url
from faden_agent.disk.files import replace_file
from faden_agent.protocol.link import LinkState

if TYPE_CHECKING:
    from faden_agent.protocol.status import LinkCounters, LinkSnapshot

log = logging.getLogger(__name__)

STATUS_FILE = "status.json"
CONTACT_WRITE_EVERY_S = 5.0  # the file is rewritten on every change of state, contacts throttled


def status_path(state_dir: Path) -> Path:
    return state_dir / STATUS_FILE


def read_link_status(state_dir: Path) -> dict[str, Any] | None:
    """The last status the stream worker wrote; None when missing or unreadable."""
    try:
        data = orjson.loads(status_path(state_dir).read_bytes())
    except (OSError, orjson.JSONDecodeError):
        return None
    return data if isinstance(data, dict) else None


class LinkStatus:
    def __init__(self, backend_url: str, status_file: Path | None):
        self._lock = threading.Lock()
        self._status_path = status_file
        self._written_at = 0.0
        self._data: dict[str, Any] = {
            "state": LinkState.STARTING,  # the key status/ps read: the connection state
            "since": time.time(),
            "backend_url": redact_url(backend_url),
            "node_id": None,
            "last_contact_at": None,
            "last_error": None,
            "last_error_at": None,
            "pid": os.getpid(),
        }

    def snapshot(self) -> LinkSnapshot:
        with self._lock:
            return cast("LinkSnapshot", dict(self._data))  # written only through the typed setters

    @property
    def connection(self) -> LinkState:
        with self._lock:
            return self._data["state"]

    def set_node(self, node_id: str) -> None:
        self._update(node_id=node_id)

    def set_connection(self, connection: LinkState, error: str | None = None) -> None:
        changes: dict[str, Any] = {"state": connection}
        if error is not None:
            changes.update(last_error=redact_text(error), last_error_at=time.time())
        self._update(**changes)

    def note(self, **counters: Unpack[LinkCounters]) -> None:
        """Counters shown beside the connection state (stale_commands, below_cursor_run, epoch_resets)."""
        self._update(**counters)

    def contact(self) -> None:
        """A successful exchange with the backend."""
        self._update(last_contact_at=time.time())

    def _update(self, **changes: Any) -> None:
        with self._lock:
            if changes.get("state") not in (None, self._data["state"]):
                changes["since"] = time.time()
            important = any(k != "last_contact_at" and self._data.get(k) != v for k, v in changes.items())
            self._data.update(changes)
            now = time.time()
            if not important and now - self._written_at < CONTACT_WRITE_EVERY_S:
                return
            self._written_at = now
            data = dict(self._data, updated_at=now)
        self._write(data)

    def _write(self, data: dict[str, Any]) -> None:
        if self._status_path is None:
            return
        try:
            replace_file(self._status_path, orjson.dumps(data), fsync=False)
        except OSError as exc:
            log.warning("cannot write the status file %s: %s", self._status_path, exc.strerror)
