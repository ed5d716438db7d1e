"""What the backend accepts (`hello`'s `accepts`) and whether it asked for a full inventory
record (downlink `inventory.full`), as the stream worker last heard: a small file in the
state directory that the inventory worker reads each round (docs/protocol.md, "Inventory
record"). Missing or unreadable: the previous protocol (nothing accepted, nothing asked).
"""

from __future__ import annotations

import logging
import time
from pathlib import Path
from typing import Any, NamedTuple

import orjson

from faden_agent.disk.files import replace_file_if_changed
from faden_agent.protocol.inventory import ACCEPTS_GZIP

log = logging.getLogger(__name__)

FILE_NAME = "backend-accepts.json"
MAX_NAMES = 64
MAX_NAME = 64


class BackendAccepts(NamedTuple):
    accepts: frozenset[str] = frozenset()
    full_requested_at: float = 0.0  # when the backend last asked for a full inventory record
    heard: bool = True  # False from the stream worker's start until this run's first `hello`


def _path(state_dir: Path) -> Path:
    return Path(state_dir) / FILE_NAME


def read(state_dir: Path) -> BackendAccepts:
    try:
        data = orjson.loads(_path(state_dir).read_bytes())
        names = frozenset(n for n in data["accepts"][:MAX_NAMES] if isinstance(n, str) and len(n) <= MAX_NAME)
        asked = data.get("full_requested_at")
        return BackendAccepts(
            names, float(asked) if isinstance(asked, int | float) else 0.0, data.get("heard", True) is not False
        )
    except (OSError, ValueError, KeyError, TypeError):
        return BackendAccepts()


def gzip_accepted(state_dir: Path) -> bool:
    """Whether the backend takes gzip uplink bodies (what the uplink and heartbeats ask)."""
    return ACCEPTS_GZIP in read(state_dir).accepts


def _write(state_dir: Path, accepts: BackendAccepts) -> None:
    content = {
        "accepts": sorted(accepts.accepts),
        "full_requested_at": accepts.full_requested_at,
        "heard": accepts.heard,
    }
    try:
        replace_file_if_changed(_path(state_dir), orjson.dumps(content))
    except OSError as exc:  # e.g. disk full: the previous protocol still works
        log.error("could not keep what the backend accepts: %s", exc)


def heard_hello(state_dir: Path, accepts: Any) -> None:
    """A `hello`: its `accepts` (absent or malformed: none, a backend of the previous version)."""
    names = accepts if isinstance(accepts, list) else []
    clean = frozenset(n for n in names[:MAX_NAMES] if isinstance(n, str) and 0 < len(n) <= MAX_NAME)
    _write(state_dir, BackendAccepts(clean, read(state_dir).full_requested_at))


def forget(state_dir: Path) -> None:
    """At the stream worker's start: nothing is known of the backend until its `hello`."""
    _write(state_dir, BackendAccepts(frozenset(), read(state_dir).full_requested_at, heard=False))


def full_requested(state_dir: Path, now: float | None = None) -> None:
    """A downlink `inventory.full`: the backend fell behind and wants a full record."""
    held = read(state_dir)
    _write(state_dir, BackendAccepts(held.accepts, time.time() if now is None else now, held.heard))
