"""The machine's drain state (`drain.json` in the state directory, 0600, atomic writes):
schedulable, cordoned, draining or drained, since when and by which command, plus the
outcome of the last node.* command per host request. The executor writes it; the heartbeat
and `faden-agent cordon|drain|uncordon` read it. A missing or unreadable file is schedulable.
"""

from __future__ import annotations

import logging
import threading
import time
from pathlib import Path
from typing import Any

import orjson

from faden_agent import protocol
from faden_agent.disk.files import replace_file

log = logging.getLogger(__name__)

DRAIN_FILE = "drain.json"
MAX_FILE_BYTES = 1024 * 1024
MAX_ANSWERS = 32  # outcomes kept for host requests (the newest)
_writing = threading.Lock()  # the executor's loop (node.undrain) and a drain's threads write


def path_in(state_dir: Path) -> Path:
    return Path(state_dir) / DRAIN_FILE


def read(state_dir: Path) -> dict[str, Any]:
    """The whole file; {"state": "schedulable"} when there is none or it is unusable."""
    try:
        with open(path_in(state_dir), "rb") as fh:
            data = orjson.loads(fh.read(MAX_FILE_BYTES + 1))
    except FileNotFoundError:
        return {"state": protocol.SCHEDULABLE}
    except (OSError, orjson.JSONDecodeError) as exc:
        log.warning("drain state %s unreadable (%s): reported as schedulable", path_in(state_dir), exc)
        return {"state": protocol.SCHEDULABLE}
    if not isinstance(data, dict) or data.get("state") not in protocol.DRAIN_STATES:
        return {"state": protocol.SCHEDULABLE}
    return well_typed(data)


_FIELD_TYPES: dict[str, tuple[type, ...]] = {
    "since": (int, float),
    "command_id": (str,),
    "request_id": (str,),
}


def well_typed(data: dict[str, Any]) -> dict[str, Any]:
    """The file's content with each known field of its type (a wrong one is left out): a hand
    edit or a flipped byte must not break the heartbeat or the CLI that reads it."""
    out = {k: v for k, v in data.items() if k not in _FIELD_TYPES or (isinstance(v, _FIELD_TYPES[k]) and v is not True)}
    containers = data.get("containers")
    out["containers"] = (
        {k: v for k, v in containers.items() if isinstance(v, str)} if isinstance(containers, dict) else {}
    )
    answers = data.get("answers")
    out["answers"] = {k: v for k, v in answers.items() if isinstance(v, dict)} if isinstance(answers, dict) else {}
    return out


def heartbeat_view(state_dir: Path) -> dict[str, Any]:
    """What a heartbeat carries: the state, since when and the command that set it."""
    data = read(state_dir)
    return {k: data.get(k) for k in ("state", "since", "command_id", "request_id")}


def update(state_dir: Path, **changes: Any) -> dict[str, Any]:
    """Merge `changes` into the file (a new `state` restarts `since`); the new content."""
    with _writing:
        return _update(state_dir, changes)


def _update(state_dir: Path, changes: dict[str, Any]) -> dict[str, Any]:
    data = read(state_dir)
    if "state" in changes and changes["state"] != data.get("state"):
        changes.setdefault("since", time.time())
    data.update(changes)
    replace_file(path_in(state_dir), orjson.dumps(data))
    return data


def record_answer(state_dir: Path, request_id: str, answer: dict[str, Any]) -> None:
    """Keep the outcome of the command that answered a host request (the CLI waits for it)."""
    with _writing:
        answers = dict(read(state_dir).get("answers") or {})
        answers[request_id] = {**answer, "at": time.time()}
        if len(answers) > MAX_ANSWERS:
            answers = dict(sorted(answers.items(), key=lambda item: item[1].get("at", 0))[-MAX_ANSWERS:])
        _update(state_dir, {"answers": answers})
