"""System logs: journald through `journalctl --follow --all --output=export`."""

from __future__ import annotations

import fcntl
import logging
import re
import subprocess
import tempfile
import time
from typing import IO, TYPE_CHECKING

import orjson

from faden_agent.node.journalctl import journalctl_argv
from faden_agent.workers.logs.entry import MAX_LINE_BYTES, Entry, Labels, clean_line
from faden_agent.workers.logs.labels import DEFAULT_LEVEL, LEVELS, level_from_priority
from faden_agent.workers.logs.sources import FIRST_START_WINDOW_S, JOURNALD, ROTATED_BEFORE_READ, Shared, Source
from faden_agent.workers.logs.sources.journald.export import ExportParser, Record, Shaped, text_fields
from faden_agent.workers.logs.sources.journald.seqnums import SeqnumGaps

if TYPE_CHECKING:
    from faden_agent.protocol.status import SourceStatus

POSITION_KEY = JOURNALD.key_prefix  # one key: the cursor
# One journalctl JSON line, read in at most this much (a 64 KiB binary MESSAGE is about
# 256 KiB of JSON as an array of byte values): a larger entry is shipped from its head,
# marked, and the rest of its line is read and dropped in pieces of this size.
MAX_ENTRY_BYTES = 1024 * 1024
MAX_FIELD_CHARS = 256  # a metadata value (unit, identifier, ...)
ENTRY_CUT_MARKER = " [faden-agent: journal entry of {size} bytes cut at {cap} bytes]"
_SMALL_FIELDS = {
    "__CURSOR": re.compile(rb'"__CURSOR":"([^"\\]{1,1024})"'),
    "__REALTIME_TIMESTAMP": re.compile(rb'"__REALTIME_TIMESTAMP":"(\d{1,20})"'),
    "PRIORITY": re.compile(rb'"PRIORITY":"([0-7])"'),
}
_CARRY = 1100  # bytes kept from the previous piece: the longest small field fits
_HEAD_MESSAGE = re.compile(rb'"MESSAGE":(\[[0-9,]*|"(?:[^"\\]|\\.)*)')
IDLE_RESTART_S = 300.0
# journald fields that become Loki structured metadata (name in Loki <- journald field).
METADATA_FIELDS = (
    ("unit", "_SYSTEMD_UNIT"),
    ("user_unit", "_SYSTEMD_USER_UNIT"),
    ("syslog_identifier", "SYSLOG_IDENTIFIER"),
    ("pid", "_PID"),
    ("comm", "_COMM"),
    ("transport", "_TRANSPORT"),
    ("boot_id", "_BOOT_ID"),
)
# Only what we ship: a huge field we do not use never reaches us, and a real entry's
# twenty-odd other fields are not parsed. Not what journalctl writes into every entry's head
# anyway (the cursor, timestamps, _BOOT_ID): it rebuilds the set of names for each entry, and
# each name asked for costs about a ninth of its CPU (docs/benchmarks.md, round 9).
ALWAYS_WRITTEN = frozenset({"_BOOT_ID"})
OUTPUT_FIELDS = ",".join(
    ["MESSAGE", "PRIORITY", *(field for _, field in METADATA_FIELDS if field not in ALWAYS_WRITTEN)]
)
_METADATA_KEYS = tuple(field.encode() for _, field in METADATA_FIELDS)
READ_BYTES = 1024 * 1024  # one read of journalctl's pipe, parsed and queued as one block
PIPE_BYTES = 1024 * 1024  # asked for (F_SETPIPE_SZ): journalctl writes on while we parse
_METADATA_CACHE_MAX = 256  # distinct (unit, pid, ...) tuples kept: one dict per process, not per line
_SHAPES_MAX = 256  # distinct fields-around-MESSAGE kept (Shaped entries): labels and metadata once per process
log = logging.getLogger(__name__)


def field_text(value: object) -> str:
    """journalctl's JSON value of a field as text: a string; an array of byte values for
    binary data; an array of those for a field that occurs more than once; null when absent."""
    if isinstance(value, str):
        return value
    if value is None:
        return ""
    if isinstance(value, list):
        if all(isinstance(b, int) for b in value):
            try:
                return bytes(value).decode("utf-8", "replace")
            except ValueError:  # not bytes after all
                return str(value)
        return "\n".join(field_text(v) for v in value)
    return str(value)


def skip_line(stream, head: bytes) -> tuple[int, dict[str, bytes]]:
    """Read and drop the rest of the current line in bounded pieces. journalctl writes the
    fields of an entry in no fixed order, so the small ones we need (cursor, timestamp,
    priority) and the start of MESSAGE are looked for in the head and in every piece.
    Returns (bytes dropped, {field: raw value})."""
    found = _small_fields(head)
    if b'"MESSAGE":' in head:
        found["MESSAGE"] = head[head.index(b'"MESSAGE":') :]
    skipped, carry = 0, head[-_CARRY:]
    while piece := stream.readline(MAX_ENTRY_BYTES):
        skipped += len(piece)
        window = carry + piece  # a field split between two pieces is still found
        for name, value in _small_fields(window).items():
            found.setdefault(name, value)
        if "MESSAGE" not in found and b'"MESSAGE":' in window:
            found["MESSAGE"] = window[window.index(b'"MESSAGE":') :]
        carry = piece[-_CARRY:]
        if piece.endswith(b"\n"):
            break
    return skipped, found


def _small_fields(data: bytes) -> dict[str, bytes]:
    return {name: match[1] for name, pattern in _SMALL_FIELDS.items() if (match := pattern.search(data))}


def message_head(head: bytes) -> str:
    """The start of MESSAGE in a piece of a cut JSON entry: a string, or an array of byte
    values (binary data); "" when the head does not reach it."""
    match = _HEAD_MESSAGE.search(head)
    if match is None:
        return ""
    value = match[1]
    if value.startswith(b"["):
        numbers = value[1:].split(b",")[:-1]  # the last one may be cut
        return bytes(int(n) for n in numbers if n.isdigit() and int(n) < 256).decode("utf-8", "replace")
    for trim in range(8):  # the cut may split an escape sequence: back off until it parses
        try:
            return orjson.loads(value[: len(value) - trim] + b'"')
        except orjson.JSONDecodeError:
            continue
    return ""


def _metadata(values: tuple[bytes | None, ...]) -> tuple[dict[str, str] | None, int]:
    """The structured metadata of one (unit, pid, ...) tuple of raw values, and its size.
    Shared by the entries that have it: nobody changes an entry's metadata."""
    metadata = {
        name: value.decode("utf-8", "replace")[:MAX_FIELD_CHARS]
        for (name, _), value in zip(METADATA_FIELDS, values, strict=True)
        if value is not None
    }
    return (metadata or None), sum(len(k) + len(v) for k, v in metadata.items())


def _grow_pipe(stream: IO[bytes]) -> None:
    """A larger pipe from journalctl (best effort: the default is 64 KiB)."""
    try:
        fcntl.fcntl(stream.fileno(), 1031, PIPE_BYTES)  # F_SETPIPE_SZ
    except OSError:
        pass


class JournaldSource(Source):
    kind = JOURNALD.name

    def __init__(self, shared: Shared) -> None:
        super().__init__(shared)
        stored = self.positions.get(POSITION_KEY)
        self.cursor: str | None = stored if isinstance(stored, str) else None  # last cursor read
        self.proc: subprocess.Popen | None = None
        self.last_output = time.monotonic()
        self.waiting_on_backlog = False
        self.restarts = 0
        self.idle_killed = False
        self.entries_cut = 0  # entries over MAX_ENTRY_BYTES, shipped from their head
        self.output_fields = True  # journalctl >= 236 prints only the fields we ship
        self._last_ts_ns = 0
        self._streams: dict[bytes | None, Labels] = {
            str(i).encode(): self.labels.system(level) for i, level in enumerate(LEVELS)
        }
        self._default_stream = self.labels.system(DEFAULT_LEVEL)
        self._metadata: dict[tuple[bytes | None, ...], tuple[dict[str, str] | None, int]] = {}
        self._shapes: dict[tuple[bytes, bytes], tuple[Labels, dict[str, str] | None, int]] = {}
        self._oversize_next = False  # the entry after the cursor is read through --output=json
        self.seqnums = SeqnumGaps(self.cursor)

    def argv(self, output: str = "export", follow: bool = True) -> list[str]:
        # --lines=all: with --follow, journalctl otherwise prints only the last 10 entries
        # after the cursor (systemd 252), silently skipping the rest.
        options = ["--all", f"--output={output}", "--no-pager", "--lines=all"]
        if follow:
            options.insert(0, "--follow")
        if self.output_fields:
            options.append(f"--output-fields={OUTPUT_FIELDS}")
        since = int(time.time()) - FIRST_START_WINDOW_S
        return journalctl_argv(options, self.config.journal_directory, self.cursor, since)

    def follow(self) -> None:
        while not self.stop_event.is_set():
            if self._oversize_next:
                self._oversize_next = False
                if not self._read_one_as_json():
                    return
            if not self._follow_export():
                return

    def _follow_export(self) -> bool:
        """Follow in export form until journalctl ends (False) or the next entry is over
        MAX_ENTRY_BYTES (True: read that one through the JSON reader, then go on)."""
        with tempfile.TemporaryFile() as errors:
            self.proc = proc = subprocess.Popen(
                self.argv(), stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=errors, bufsize=0
            )
            assert proc.stdout is not None  # stdout=PIPE
            _grow_pipe(proc.stdout)
            self.last_output = time.monotonic()
            parser = ExportParser()
            read = 0
            try:
                while data := proc.stdout.read(READ_BYTES):
                    self.last_output = time.monotonic()
                    entries = self.export_entries(parser.feed(data))
                    if entries and not self._queue(entries):
                        return False
                    read += len(entries)
                    if len(parser.pending) > MAX_ENTRY_BYTES:  # held whole no further
                        self._oversize_next = True  # journalctl is ended by us: no failure
                        return True
            finally:
                self._end(proc)
            errors.seek(0)
            self._report_exit(proc, read, errors.read()[-1000:].decode("utf-8", "replace").strip())
            return False

    def _read_one_as_json(self) -> bool:
        """The entry after the cursor through `--output=json`, whose reader is bounded per
        line (skip_line, oversize_entry). False when the backlog closed or nothing came."""
        with tempfile.TemporaryFile() as errors:
            argv = self.argv("json", follow=False)
            self.proc = proc = subprocess.Popen(
                argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=errors, bufsize=1 << 16
            )
            self.last_output = time.monotonic()
            assert proc.stdout is not None  # stdout=PIPE
            try:
                while raw := proc.stdout.readline(MAX_ENTRY_BYTES):  # bounded: never a whole huge line
                    self.last_output = time.monotonic()
                    if len(raw) >= MAX_ENTRY_BYTES and not raw.endswith(b"\n"):
                        entry = self.oversize_entry(raw, *skip_line(proc.stdout, raw))
                    else:
                        entry = self.to_entry(raw)
                    if entry is not None:
                        return self._queue([entry])
            finally:
                self._end(proc)
            errors.seek(0)
            self._report_exit(proc, 0, errors.read()[-1000:].decode("utf-8", "replace").strip())
            return False

    def _queue(self, entries: list[Entry]) -> bool:
        """Into the backlog (waiting while it is full); False once it closed."""
        self.waiting_on_backlog = True
        try:
            kept = self.backlog.put_many(entries)
        finally:
            self.waiting_on_backlog = False
        self.last_output = time.monotonic()  # a long wait for Loki is not silence
        if kept:
            self.cursor = entries[kept - 1].position
            self.lines_read += kept
            if gap := self.seqnums.gap(entries[:kept] if kept < len(entries) else entries):
                self.lost(gap, ROTATED_BEFORE_READ)
        return kept == len(entries)

    def _report_exit(self, proc: subprocess.Popen, read: int, stderr: str) -> None:
        self.restarts += 1
        if self.stop_event.is_set() or self.idle_killed:
            self.idle_killed = False
            return
        self.last_error = f"journalctl exited with {proc.returncode}: {stderr}"[:300]
        if read == 0 and self.output_fields and "output-fields" in stderr:
            log.warning("logs: this journalctl has no --output-fields (systemd < 236); reading every field")
            self.output_fields = False  # the entry cap still bounds what is read
            return
        if read == 0 and self.cursor and "cursor" in stderr.lower():
            log.error("logs: journalctl refused the stored cursor (%s); starting from the first-start window", stderr)
            self.cursor = None
            return
        log.warning("logs: %s; restarting it after the last cursor read", self.last_error)

    def _end(self, proc: subprocess.Popen) -> None:
        if proc.poll() is None:
            proc.kill()
        proc.wait()
        if proc.stdout is not None:
            proc.stdout.close()

    def export_entries(self, records: list[Record | Shaped]) -> list[Entry]:
        """export_entry of each record, those without a cursor left out; the usual (Shaped)
        entry straight to _shaped_entry: one call a line fewer in a flood."""
        shaped, other = self._shaped_entry, self.export_entry
        return [e for r in records if (e := shaped(r) if type(r) is tuple else other(r)) is not None]

    def export_entry(self, record: Record | Shaped) -> Entry | None:
        """An Entry from one export record (journald/export.py), the same as to_entry would
        make of the entry's JSON; None without a cursor (nothing to resume after)."""
        if isinstance(record, tuple):
            return self._shaped_entry(record)
        cursor = record.get(b"__CURSOR")
        if cursor is None:
            return None
        try:
            ts_ns = int(record[b"__REALTIME_TIMESTAMP"]) * 1000
        except (KeyError, ValueError):
            ts_ns = -1
        if not 0 <= ts_ns < 2**63:  # outside Loki's nanosecond range: Loki would refuse the line
            ts_ns = self._last_ts_ns
        self._last_ts_ns = ts_ns
        key = tuple(map(record.get, _METADATA_KEYS))
        known = self._metadata.get(key)
        if known is None:
            known = self._metadata[key] = _metadata(key)
            if len(self._metadata) > _METADATA_CACHE_MAX:
                self._metadata.clear()
        metadata, metadata_size = known
        line = clean_line(record.get(b"MESSAGE", b""))
        return Entry(
            self._streams.get(record.get(b"PRIORITY"), self._default_stream),
            ts_ns,
            line,
            metadata,
            POSITION_KEY,
            cursor.decode("utf-8", "replace"),
            len(line) + 64 + metadata_size,
        )

    def _shaped_entry(self, shaped: Shaped) -> Entry:
        """export_entry of the usual entry: its labels and metadata are looked up by the
        fields around MESSAGE (the same for every line of a process), not built per line."""
        cursor, realtime, before, message, after = shaped
        ts_ns = int(realtime) * 1000  # digits only (export.py's expression)
        if ts_ns >= 2**63:  # outside Loki's nanosecond range: Loki would refuse the line
            ts_ns = self._last_ts_ns
        self._last_ts_ns = ts_ns
        shape = self._shapes.get((before, after))  # a pair: no joined copy to hash per line
        if shape is None:
            if len(self._shapes) >= _SHAPES_MAX:
                self._shapes.clear()
            record = text_fields(before + after)
            metadata, metadata_size = _metadata(tuple(map(record.get, _METADATA_KEYS)))
            stream = self._streams.get(record.get(b"PRIORITY"), self._default_stream)
            shape = self._shapes[(before, after)] = (stream, metadata, 64 + metadata_size)
        stream, metadata, overhead = shape
        short = len(message) <= MAX_LINE_BYTES
        try:  # strict UTF-8 first: the usual line, and a third cheaper than naming the handler
            line = message.decode() if short else clean_line(message)
            position = cursor.decode()
        except UnicodeDecodeError:
            line = message.decode("utf-8", "replace") if short else clean_line(message)
            position = cursor.decode("utf-8", "replace")
        return Entry(stream, ts_ns, line, metadata, POSITION_KEY, position, len(line) + overhead)

    def to_entry(self, raw: bytes) -> Entry | None:
        try:
            record = orjson.loads(raw)
        except orjson.JSONDecodeError:
            log.warning("logs: skipped a line journalctl did not write as JSON: %r", raw[:200])
            return None
        if not isinstance(record, dict) or not isinstance(record.get("__CURSOR"), str):
            return None  # cannot be resumed after: not a journal entry
        return self.to_record_entry(record)

    def to_record_entry(self, record: dict, line: str | None = None) -> Entry:
        cursor = record["__CURSOR"]
        try:
            ts_ns = int(record["__REALTIME_TIMESTAMP"]) * 1000
        except (KeyError, TypeError, ValueError):
            ts_ns = -1
        if not 0 <= ts_ns < 2**63:  # outside Loki's nanosecond range: Loki would refuse the line
            ts_ns = self._last_ts_ns  # stays in order; the cursor still tells where we are
        self._last_ts_ns = ts_ns
        metadata = {
            name: field_text(record[field])[:MAX_FIELD_CHARS] for name, field in METADATA_FIELDS if field in record
        }
        return Entry(
            stream=self.labels.system(level_from_priority(record.get("PRIORITY"))),
            ts_ns=ts_ns,
            line=clean_line(field_text(record.get("MESSAGE"))) if line is None else line,
            metadata=metadata or None,
            source=POSITION_KEY,
            position=cursor,
        )

    def oversize_entry(self, head: bytes, rest: int, found: dict[str, bytes]) -> Entry | None:
        """An entry whose JSON is over MAX_ENTRY_BYTES: its cursor, timestamp and priority
        (found while its line was read and dropped), and MESSAGE as far as one piece holds
        it, marked. At most two pieces of the entry were ever in memory."""
        self.entries_cut += 1
        size = len(head) + rest
        if "__CURSOR" not in found:
            log.warning("logs: skipped a journal entry of %d bytes without a cursor", size)
            return None
        record = {name: value.decode() for name, value in found.items() if name != "MESSAGE"}
        return self.to_record_entry(
            record,
            clean_line(message_head(found.get("MESSAGE", b"")))
            + ENTRY_CUT_MARKER.format(size=size, cap=MAX_ENTRY_BYTES),
        )

    def check(self) -> None:
        super().check()
        proc = self.proc
        if (
            proc is not None
            and proc.poll() is None
            and not self.waiting_on_backlog
            and time.monotonic() - self.last_output > IDLE_RESTART_S
        ):
            log.info("logs: journalctl silent for %.0fs; restarting it", IDLE_RESTART_S)
            self.last_output = time.monotonic()
            self.idle_killed = True
            proc.kill()

    def stop(self) -> None:
        proc = self.proc
        if proc is not None and proc.poll() is None:
            proc.kill()

    def status(self) -> SourceStatus:
        return {**super().status(), "restarts": self.restarts, "entries_cut": self.entries_cut}
