"""The machine goes down (the supervisor saw logind's PrepareForShutdown): report
`node.shutting_down` through the outbox, have the log worker ship what it holds, wait until the
outbox is empty, then say `ready` (the supervisor releases the inhibitor); all before `until`.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from pathlib import Path

from faden_agent import protocol
from faden_agent.backend.outbox import Outbox
from faden_agent.config import Config
from faden_agent.ipc import Endpoints, EnvelopeError, request

log = logging.getLogger(__name__)

BOOT_ID = Path("/proc/sys/kernel/random/boot_id")
POLL_S = 0.05
ASK_TIMEOUT_S = 0.5


def boot_id() -> str:
    try:
        return BOOT_ID.read_text().strip()[:64] or "unknown"
    except OSError:
        return "unknown"


def report_shutdown(
    config: Config,
    outbox: Outbox | None,
    poke_uplink: Callable[[], None],
    until_mono: float,
    stop_event: threading.Event,
) -> bool:
    """Report, ship, drain; whether all of it happened before `until_mono`."""
    started = time.monotonic()
    if outbox is None:  # not a member yet: there is no backend to tell
        return True
    boot = boot_id()
    at = time.time()
    event = {"type": protocol.SHUTTING_DOWN_EVENT, "at": at, "boot_id": boot}
    # The time in the id too: a shutdown cancelled, then another, is reported twice.
    outbox.put(protocol.EVENT, event, record_id=f"ev:shutdown:{boot}:{int(at * 1000)}")
    poke_uplink()
    # A line may wait in a multiline join this long for its continuation before it is queued.
    settle = config.log_multiline_wait_sec + 0.1 if config.log_multiline else 0.0
    shipped = _wait(
        lambda: _lines_pending(config) == 0 and time.monotonic() >= started + settle, until_mono, stop_event
    )
    drained = _wait(lambda: _outbox_empty(outbox, poke_uplink), until_mono, stop_event)
    log.warning(
        "shutdown reported in %.2fs: last log lines %s, outbox %s",
        time.monotonic() - started,
        "shipped" if shipped else "NOT all shipped",
        "empty" if drained else "NOT empty",
    )
    return shipped and drained


def _wait(done: Callable[[], bool], until_mono: float, stop_event: threading.Event) -> bool:
    while not done():
        if time.monotonic() >= until_mono or stop_event.wait(POLL_S):
            return False
    return True


def _lines_pending(config: Config) -> int | None:
    """The log worker's lines not yet accepted by Loki (it ships at once from now on); 0 when
    there is no log worker; None when it does not answer."""
    endpoints = Endpoints(config.runtime_dir)
    if not endpoints.socket_path(endpoints.logs).exists():
        return 0
    try:
        reply = request(endpoints.logs, "flush", {}, timeout_s=ASK_TIMEOUT_S)
    except EnvelopeError:
        return None
    pending = (reply.body or {}).get("pending") if reply is not None and reply.type == "flush" else None
    return pending if isinstance(pending, int) else None


def _outbox_empty(outbox: Outbox, poke_uplink: Callable[[], None]) -> bool:
    if outbox.count(wait_s=POLL_S) == 0:
        return True
    poke_uplink()
    return False
