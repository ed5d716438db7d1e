"""KernelLines: the kernel's lines of this boot, each handed to every consumer (a KernelConsumer:
`name` and `take(line)`; adding one is `lines.add(consumer)`), from the host's journal when
there is one, else /dev/kmsg. Owns the position (`cursor`: "journald:<cursor>" or
"kmsg:<boot id>:<seq>", saved by the caller); an unusable one starts at the boot's start.
`problem` says why no source can be read; a consumer that raises loses that line only.
"""

from __future__ import annotations

import logging
import os
import subprocess
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple, Protocol

from faden_agent.workers.inventory.kernel import journald, kmsg

if TYPE_CHECKING:
    from faden_agent.protocol.status import KernelSourceStatus

log = logging.getLogger(__name__)

RESTART_S = 10.0  # a source ended: read again (or look for one) after this
JOURNALD, KMSG = "journald", "kmsg"


class KernelLine(NamedTuple):
    text: str
    at: float  # wall time (seconds)
    boot_id: str | None  # journald's form: 32 hex digits
    source: str  # JOURNALD or KMSG
    level: int | None  # syslog level, 0 (emerg) to 7 (debug)
    # kmsg's record number, which names the line within its boot: its `at` is computed from
    # the clocks at each read (a restart re-reads the lines after the saved position)
    seq: int | None = None


class KernelConsumer(Protocol):
    name: str

    def take(self, line: KernelLine) -> None: ...


class KernelLines:
    def __init__(
        self,
        stop_event: threading.Event,
        boot_id: str | None,
        cursor: str | None = None,
        journal_directory: Path | None = None,
        kmsg_path: Path = Path("/dev/kmsg"),
        changed: Callable[[], None] = lambda: None,
    ):
        """`changed()` is called when the source or its problem changes (a record says so)."""
        self.stop_event = stop_event
        self.boot_id = boot_id
        self.cursor = cursor
        self.journal_directory = journal_directory
        self.kmsg_path = kmsg_path
        self.changed = changed
        self.consumers: list[KernelConsumer] = []
        self.source: str | None = None  # the one read now
        self.problem: str | None = None  # why no kernel line can be read (None: one source can)
        self.note: str | None = None  # what went wrong last without stopping the reading
        self.lines = 0
        self._failed: dict[str, int] = {}  # consumer name -> lines it raised on
        self._proc: subprocess.Popen[bytes] | None = None

    def add(self, consumer: KernelConsumer) -> None:
        self.consumers.append(consumer)

    def status(self) -> KernelSourceStatus:
        return {
            "source": self.source,
            "problem": self.problem,
            "note": self.note,
            "lines": self.lines,
            "consumer_errors": dict(self._failed),
        }

    # --- the reading thread

    def run(self) -> None:
        while not self.stop_event.is_set():
            try:
                self._read_one_source()
            except Exception as exc:  # noqa: BLE001 - a source failing is a state, said in status
                self._set(self.source, f"{self.source or 'kernel log'}: {exc}"[:300])
            self.stop_event.wait(RESTART_S)

    def stop(self) -> None:
        self.stop_event.set()
        proc = self._proc
        if proc is not None and proc.poll() is None:
            proc.kill()

    def _read_one_source(self) -> None:
        source, problem = kernel_source(self.journal_directory, self.kmsg_path)
        if source == JOURNALD:
            self._set(JOURNALD, None)
            self._follow_journal()
            return
        if source is None:
            self._set(None, problem)
            return
        fd = kmsg.open_kmsg(self.kmsg_path)
        self._set(KMSG, None)
        try:
            self._follow_kmsg(fd)
        finally:
            os.close(fd)

    def _set(self, source: str | None, problem: str | None) -> None:
        if (source, problem) != (self.source, self.problem):
            self.source, self.problem = source, problem
            if problem:
                log.warning("%s", problem)
            self.changed()

    def _follow_journal(self) -> None:
        cursor = self._journal_cursor()
        if self.cursor is not None and cursor is None:
            self.note = "the saved kernel log position was unusable: read from the boot's start"
        command = journald.argv(self.journal_directory, self.boot_id, cursor)

        def started(proc: subprocess.Popen[bytes]) -> None:
            self._proc = proc

        try:
            for entry in journald.follow(command, self.stop_event.is_set, started):
                text = journald.message_text(entry)
                if text is not None:
                    self._hand(KernelLine(text, _realtime(entry), _boot(entry), JOURNALD, _level(entry)))
                if isinstance(entry.get("__CURSOR"), str):
                    self.cursor = f"{JOURNALD}:{entry['__CURSOR']}"
        except journald.JournalEnded as ended:
            if cursor is not None and ended.entries == 0 and ended.status != 0:
                self.cursor = None  # journalctl could not seek to it: the boot's start next time
                self.note = f"the kernel log position was refused ({ended}): read from the boot's start"
                return
            raise
        finally:
            self._proc = None

    def _journal_cursor(self) -> str | None:
        kind, _, value = (self.cursor or "").partition(":")
        if kind != JOURNALD and journald.usable_cursor(self.cursor):
            value = self.cursor or ""  # saved before positions named their source
        return value if journald.usable_cursor(value) else None

    def _follow_kmsg(self, fd: int) -> None:
        after = self._kmsg_seq()
        if self.cursor is not None and after is None and not self.cursor.startswith(f"{JOURNALD}:"):
            self.note = "the saved kernel log position was unusable: read from the boot's start"
        zero = kmsg.boot_wall_time()
        for record in kmsg.records(fd, self.stop_event.is_set):
            if record is None:
                continue
            if after is not None and record.seq <= after:
                continue
            self._hand(KernelLine(record.text, zero + record.usec / 1e6, self.boot_id, KMSG, record.level, record.seq))
            self.cursor = f"{KMSG}:{self.boot_id or ''}:{record.seq}"

    def _kmsg_seq(self) -> int | None:
        """The saved kmsg position's seq when it is of this boot, else None (the boot's start)."""
        kind, _, rest = (self.cursor or "").partition(":")
        boot, _, seq = rest.rpartition(":")
        if kind != KMSG or not seq.isdigit() or len(seq) > 20 or not boot or boot != self.boot_id:
            return None
        return int(seq)

    def _hand(self, line: KernelLine) -> None:
        self.lines += 1
        for consumer in self.consumers:
            try:
                consumer.take(line)
            except Exception:  # noqa: BLE001 - one consumer's fault loses it that line, nothing else
                failed = self._failed[consumer.name] = self._failed.get(consumer.name, 0) + 1
                if failed == 1:
                    log.exception("kernel line consumer %s failed on a line", consumer.name)


def kernel_source(journal_directory: Path | None, kmsg_path: Path) -> tuple[str | None, str | None]:
    """(the source this host's kernel lines are read from, why not the journal) or (None, why
    neither can be read)."""
    journal_problem = journald.journal_problem(journal_directory)
    if journal_problem is None:
        return JOURNALD, None
    try:
        os.close(kmsg.open_kmsg(kmsg_path))
    except OSError as exc:
        return None, f"no kernel log: {journal_problem}; {kmsg_path}: {exc.strerror or exc}"
    return KMSG, journal_problem


def _realtime(entry: dict[str, Any]) -> float:
    raw = entry.get("__REALTIME_TIMESTAMP")
    if isinstance(raw, str) and raw.isdigit() and len(raw) <= 19:
        return int(raw) / 1e6
    return time.time()


def _boot(entry: dict[str, Any]) -> str | None:
    boot = entry.get("_BOOT_ID")
    return boot.lower() if isinstance(boot, str) and len(boot) == 32 else None


def _level(entry: dict[str, Any]) -> int | None:
    raw = entry.get("PRIORITY")
    return int(raw) if isinstance(raw, str) and raw.isdigit() and len(raw) == 1 else None
