"""`faden-agent cordon|drain|uncordon|gpu forget|check|reset`: a host request put in the agent's outbox (the
stream worker sends it over its own link), then the backend's answer awaited: the command it
sends, its progress and outcome as the executor records them (node/drainstate.py).
Exit codes: EXIT_DONE, EXIT_FAILED (the answer's reason), EXIT_NOT_ENROLLED, EXIT_PENDING.
"""

from __future__ import annotations

import sqlite3
import time
import uuid
from collections.abc import Callable
from typing import Any

from faden_agent import protocol
from faden_agent.common.durations import parse_duration
from faden_agent.config import Config
from faden_agent.disk.files import PrivateDirError, ensure_private_dir
from faden_agent.node import drainstate
from faden_agent.node.linkstatus import read_link_status

EXIT_DONE = 0
EXIT_FAILED = 1  # the backend's command failed or was rejected: the reason is printed
EXIT_NOT_ENROLLED = 3  # no node identity here: nothing to ask with
EXIT_PENDING = 4  # no answer in time: a cordon stays queued (sent when the link is back); drain/uncordon expire
POLL_S = 0.2
ANSWER_SLACK_S = 60.0  # a drain's answer may come this long after its deadline (link, queue, removals)
QUICK_WAIT_S = 30.0  # cordon and uncordon: how long the CLI waits for the backend by default
DRAIN_DEADLINE_S = 300.0
# the agent's defaults (commands/node.py, commands/gpu.py): a check's is its level 1 time limit
DEFAULT_DEADLINES = {"drain": DRAIN_DEADLINE_S, "gpu.check": 120.0, "gpu.reset": 600.0}
WAIT_MAX_S = protocol.MAX_DRAIN_DEADLINE_S + ANSWER_SLACK_S  # nobody waits for an answer longer


class RequestNotQueued(Exception):
    pass


def durations_asked(
    action: str, deadline: str | None, wait: str | None, bound_s: float | None = None
) -> tuple[float | None, float]:
    """(the drain's or reset's deadline, how long to wait for the answer) from the command line,
    bounded (durations.parse_duration); `bound_s`: a check's time limit, the wait's base without a
    deadline. BadDuration names the option and the value."""
    deadline_s = parse_duration(deadline, "--deadline", protocol.MAX_DRAIN_DEADLINE_S) if deadline else None
    base = deadline_s or bound_s
    wait_s = parse_duration(wait, "--wait", WAIT_MAX_S) if wait is not None else default_wait(action, base)
    return deadline_s, wait_s


def send_request(config: Config, action: str, deadline_s: float | None, wait_s: float, **fields: Any) -> str:
    """Put the host request (with the action's own `fields`: gpu.forget's uuid) in the outbox
    (durable; the stream worker is woken); its id."""
    from faden_agent.backend.producer import Reports

    request_id = uuid.uuid4().hex
    data: dict[str, Any] = {"action": action, "request_id": request_id, "requested_at": time.time(), **fields}
    if deadline_s is not None:
        data["deadline_s"] = deadline_s
    if action != "cordon":  # a drain or uncordon nobody waits for any more must not run later
        data["expires_at"] = time.time() + wait_s
    try:
        reports = Reports(config)
        try:
            reports.put(protocol.HOST_REQUEST, data, record_id=f"hr:{request_id}")
        finally:
            reports.close()
    except (OSError, sqlite3.Error) as exc:
        raise RequestNotQueued(
            f"cannot write the agent's outbox in {config.state_dir}: {exc} (run this as the agent's user)"
        ) from None
    return request_id


def await_answer(config: Config, request_id: str, wait_s: float, say: Callable[[str], None]) -> dict[str, Any] | None:
    """Print the drain's progress until the answer to `request_id` is recorded; None after `wait_s`."""
    until = time.monotonic() + wait_s
    shown: dict[str, Any] = {}
    link_said = False
    while time.monotonic() < until:
        data = drainstate.read(config.state_dir)
        answer = (data.get("answers") or {}).get(request_id)
        if data.get("request_id") == request_id:
            _show_progress(data, shown, say)
        if answer is not None:
            return answer
        if not link_said and (problem := link_problem(config)):
            say(f"the link to the backend is not up ({problem}); waiting")
            link_said = True
        time.sleep(POLL_S)
    return None


def _show_progress(data: dict[str, Any], shown: dict[str, Any], say: Callable[[str], None]) -> None:
    if shown.get("") != data.get("state"):
        shown[""] = data.get("state")
        say(f"machine: {data.get('state')}")
    for name, phase in sorted((data.get("containers") or {}).items()):
        if shown.get(name) != phase:
            shown[name] = phase
            say(f"  {name}: {phase}")


def link_problem(config: Config) -> str | None:
    """The link's state when it is not connected (the stream worker's status file), else None."""
    status = read_link_status(config.state_dir)
    if status is None:
        return "no status yet"
    if status.get("state") == "connected":
        return None
    error = status.get("last_error")
    return f"{status.get('state')}: {error}" if error else str(status.get("state"))


def outcome_lines(answer: dict[str, Any]) -> tuple[int, list[str]]:
    """The exit code and the lines that say the backend's answer (fields of a wrong type shown as absent)."""
    if answer.get("state") != protocol.SUCCEEDED:
        return EXIT_FAILED, [f"failed ({answer.get('reason')}): {answer.get('message')}"]
    lines = [str(answer.get("message"))]
    result = _object(answer, "result")
    for name, outcome in sorted({**_object(result, "containers"), **_object(result, "stopped")}.items()):
        outcome = outcome if isinstance(outcome, dict) else {}
        lines.append(f"  {name}: {outcome.get('how')} (exit code {outcome.get('exit_code')})")
    checked = _object(result, "check") or result  # a reset's check, or a check itself
    for gpu_uuid, gpu in _object(checked, "gpus").items():
        gpu = gpu if isinstance(gpu, dict) else {}
        lines.append(f"  GPU {gpu.get('index')} ({gpu_uuid}): {gpu.get('outcome')}")
        listed = gpu.get("tests")
        tests = listed if isinstance(listed, list) else []
        for test in (t for t in tests if isinstance(t, dict) and t.get("result") != "pass"):
            lines.append(f"    {test.get('name')}: {test.get('result')}: {test.get('detail')}")
    return EXIT_DONE, lines


def _object(data: dict[str, Any], key: str) -> dict[str, Any]:
    value = data.get(key)
    return value if isinstance(value, dict) else {}


def state_problem(config: Config) -> tuple[str, int] | None:
    """Why this user cannot ask from this machine (one line and the exit code), or None: not
    enrolled, a state directory it cannot read, or one it must not write (ensure_private_dir)."""
    try:
        if not config.state_path.exists():
            return f"not enrolled ({config.state_path} does not exist): nothing to ask", EXIT_NOT_ENROLLED
        ensure_private_dir(config.state_dir, "state directory")
    except PrivateDirError as exc:
        return str(exc), EXIT_FAILED
    except OSError as exc:
        return (
            f"cannot read the agent's state in {config.state_dir} ({exc.strerror or exc}): run this as the agent's"
            " user (root for the service)",
            EXIT_FAILED,
        )
    return None


def default_wait(action: str, deadline_s: float | None) -> float:
    """How long the CLI waits for the answer: a drain's or reset's deadline (a check's time
    limit) and the slack; cordon and uncordon are quick."""
    if action in DEFAULT_DEADLINES:
        return (deadline_s or DEFAULT_DEADLINES[action]) + ANSWER_SLACK_S
    return QUICK_WAIT_S
