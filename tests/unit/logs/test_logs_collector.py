"""The log worker's young generation (worker.YOUNG_GENERATION) against what a flood really keeps
alive: a full backlog of journald lines, made the way the source makes them from journalctl's
export form of a real journal file, leaves the collector's count under it, so those lines
are freed by their last reference and never walked while they wait."""

from __future__ import annotations

import gc
import subprocess

import pytest

from faden_agent.workers.logs.backlog import MAX_LINES, Backlog
from faden_agent.workers.logs.sources.journald.export import ExportParser
from faden_agent.workers.logs.sources.journald.source import OUTPUT_FIELDS, READ_BYTES
from faden_agent.workers.logs.worker import YOUNG_GENERATION
from tests.support.journalfiles import JOURNAL_REMOTE, JournalWriter
from tests.unit.logs.test_logs_journal_export import make_source

pytestmark = pytest.mark.skipif(not __import__("os").path.exists(JOURNAL_REMOTE), reason="no systemd-journal-remote")


def test_a_full_backlog_of_journal_lines_stays_under_the_young_generation(tmp_path):
    journal = JournalWriter(tmp_path / "journal")
    journal.append([journal.entry(f"flood line {i} " + "x" * 80, 6, _PID="42") for i in range(MAX_LINES + 2000)])
    argv = ["journalctl", f"--directory={journal.directory}", "--output=export", "--all", "--no-pager"]
    exported = subprocess.run([*argv, f"--output-fields={OUTPUT_FIELDS}"], capture_output=True, check=True).stdout
    source = make_source(tmp_path)
    backlog = Backlog()
    parser = ExportParser()
    gc.collect()
    gc.disable()  # the count below is then every tracked object still alive since the collect
    try:
        before = gc.get_count()[0]
        for start in range(0, len(exported), READ_BYTES):  # as the source reads the pipe
            entries = [e for r in parser.feed(exported[start : start + READ_BYTES]) if (e := source.export_entry(r))]
            backlog.put_many(entries[: MAX_LINES - len(backlog)])
            if len(backlog) == MAX_LINES:
                break
        held = gc.get_count()[0] - before
    finally:
        gc.enable()
    assert len(backlog) == MAX_LINES
    assert MAX_LINES <= held < YOUNG_GENERATION / 2, held  # room for the batches in flight besides
