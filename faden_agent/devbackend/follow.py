"""`faden-agent admin command ID --follow`: a command's timeline for a human, as it happens."""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable
from datetime import datetime
from typing import Any

import orjson
from rich.console import Console
from rich.filesize import decimal
from rich.progress import BarColumn, Progress, TaskID, TaskProgressColumn, TextColumn

from faden_agent import protocol
from faden_agent.devbackend.admin import AdminClient, AdminError

POLL_S = 0.5
RATE_WINDOW_S = 10.0  # rate over the records of the last few seconds, not since the start
# Record fields that are bookkeeping, not news for the reader.
_QUIET = {"command_id", "state", "ts", "received_at", "reason", "message"}
_STYLE = {
    protocol.SUCCEEDED: "bold green",
    protocol.FAILED: "bold red",
    protocol.REJECTED: "bold red",
    protocol.CANCELLED: "bold yellow",
}


def _clock(ts: float) -> str:
    return datetime.fromtimestamp(ts).strftime("%H:%M:%S")


def _fields(record: dict[str, Any]) -> str:
    """key=value of the scalar fields, one level of dicts (a result) flattened, long values cut."""
    flat: dict[str, Any] = {}
    for key, value in record.items():
        if key in _QUIET:
            continue
        if isinstance(value, dict):
            flat.update({k: v for k, v in value.items() if not isinstance(v, (dict, list))})
        elif not isinstance(value, list):
            flat[key] = value
    return " ".join(f"{k}={str(v)[:40]}" for k, v in flat.items() if v not in (None, ""))


class Transfer:
    """The byte figures of one progress series (a phase on a target) and its rate."""

    def __init__(self) -> None:
        self.samples: deque[tuple[float, int]] = deque()
        self.done = 0
        self.total = 0

    def add(self, ts: float, done: int, total: int) -> None:
        self.done, self.total = done, total
        self.samples.append((ts, done))
        while len(self.samples) > 2 and ts - self.samples[0][0] > RATE_WINDOW_S:
            self.samples.popleft()

    def rate(self) -> float | None:
        (t0, d0), (t1, d1) = self.samples[0], self.samples[-1]
        return (d1 - d0) / (t1 - t0) if t1 > t0 else None

    def figures(self) -> str:
        text = f"{decimal(self.done)} / {decimal(self.total) if self.total else '?'}"
        rate = self.rate()
        if rate:
            text += f"  {decimal(int(rate))}/s"
            if self.total > self.done:
                text += f"  ETA {int((self.total - self.done) / rate)}s"
        return text


class TimelineView:
    """Prints records as they come; call `show(records)` with the whole timeline each poll."""

    def __init__(self, console: Console):
        self.console = console
        self.seen: set[bytes] = set()
        self.started_at: float | None = None
        self.transfers: dict[str, Transfer] = {}
        self.tasks: dict[str, TaskID] = {}
        self.bars: Progress | None = None
        self.terminal: dict[str, Any] | None = None
        if console.is_terminal:
            self.bars = Progress(
                TextColumn("{task.description}"),
                BarColumn(),
                TaskProgressColumn(),
                TextColumn("{task.fields[figures]}"),
                console=console,
                auto_refresh=False,
            )
            self.bars.start()

    def close(self) -> None:
        """Stop the bars; the outcome comes last, below them."""
        if self.bars is not None:
            self.bars.refresh()
            self.bars.stop()
        if self.terminal is not None:
            self._line(self.terminal)

    def show(self, records: list[dict[str, Any]]) -> dict[str, Any] | None:
        """Print what is new; returns the terminal record once there is one."""
        for record in records:
            key = orjson.dumps(record, option=orjson.OPT_SORT_KEYS)
            if key in self.seen:
                continue
            self.seen.add(key)
            if self.started_at is None or record["state"] == protocol.RECEIVED:
                self.started_at = min(self.started_at or record["ts"], record["ts"])
            if record["state"] in protocol.TERMINAL_STATES:
                self.terminal = self.terminal or record  # printed by close()
            elif record["state"] == protocol.PROGRESS and "bytes_done" in record:
                self._progress(record)
            else:
                self._line(record)
        if self.bars is not None:
            self.bars.refresh()
        return self.terminal

    def _stamp(self, record: dict[str, Any]) -> str:
        since = record["ts"] - (self.started_at or record["ts"])
        return f"{_clock(record['ts'])} {since:+7.1f}s"

    def _line(self, record: dict[str, Any]) -> None:
        state = record["state"]
        detail = _fields(record)
        if state in protocol.TERMINAL_STATES:
            detail = f"{record.get('reason')}: {record.get('message')}" + (f"  ({detail})" if detail else "")
        self.console.print(
            f"{self._stamp(record)}  [{_STYLE.get(state, 'bold')}]{state:<10}[/] {detail}",
            highlight=False,
            markup=True,
            soft_wrap=True,
        )

    def _progress(self, record: dict[str, Any]) -> None:
        phase = record.get("phase", "progress")
        target = record.get("image") or record.get("target") or record.get("path") or ""
        name = f"{phase} {target}".strip()
        transfer = self.transfers.setdefault(name, Transfer())
        transfer.add(record["ts"], int(record.get("bytes_done") or 0), int(record.get("bytes_total") or 0))
        if self.bars is None:
            percent = f"{100 * transfer.done / transfer.total:5.1f} %" if transfer.total else "    ? %"
            self.console.print(
                f"{self._stamp(record)}  progress   {name}  {percent}  {transfer.figures()}",
                highlight=False,
                markup=False,
                soft_wrap=True,
            )
            return
        if name not in self.tasks:
            self.tasks[name] = self.bars.add_task(name, total=None, figures="")
        self.bars.update(
            self.tasks[name], completed=transfer.done, total=transfer.total or None, figures=transfer.figures()
        )


def follow(
    admin: AdminClient,
    command_id: str,
    console: Console,
    poll_s: float = POLL_S,
    sleep: Callable[[float], None] = time.sleep,
) -> dict[str, Any]:
    """Show the command's timeline until its terminal state; returns the final command document.
    A backend that stops answering for a while (a restart) is waited for, said once."""
    view = TimelineView(console)
    waiting_said = silence_said = False
    try:
        document = admin.command(command_id)  # an unknown id or a refused token ends it here
        while True:
            if not document["timeline"] and not waiting_said:
                console.print(
                    f"queued: waiting for node {document['node_id']} to take {document['kind']} {command_id}",
                    highlight=False,
                    markup=False,
                )
                waiting_said = True
            if view.show(document["timeline"]) is not None:
                return document
            sleep(poll_s)
            try:
                document = admin.command(command_id)
                silence_said = False
            except AdminError as exc:
                if not silence_said:
                    console.print(
                        f"(the backend does not answer: {exc}; still waiting)",
                        style="dim",
                        highlight=False,
                        markup=False,
                    )
                    silence_said = True
                sleep(poll_s * 4)
    finally:
        view.close()
