"""Managed containers' logs in a real agent, as the container log tests read them: fixtures
`loki` (a Loki receiver) and `agent` (an executor agent shipping there; it needs `executor_factory`
of tests/support/executorproc.py imported beside it), the labels of a managed container, and
the lines that arrived of one container."""

from __future__ import annotations

import pytest

from faden_agent import protocol
from tests.support.journalfiles import JournalWriter
from tests.support.logsagent import text
from tests.support.lokireceiver import LokiReceiver

AGENT_ID = "fx-agent"


@pytest.fixture
def loki():
    with LokiReceiver() as receiver:
        yield receiver


@pytest.fixture
def agent(executor_factory, loki, tmp_path):
    journal = JournalWriter(tmp_path / "journal")
    journal.append(journal.lines(["boot"]))
    return executor_factory(
        full_agent=True, loki_url=loki.url, journal_directory=journal.directory, log_flush_interval_sec=0.2
    )


def managed(**extra: str) -> dict[str, str]:
    return {protocol.LABEL_MANAGED: "true", protocol.LABEL_AGENT_ID: AGENT_ID, **extra}


def lines_of(loki: LokiReceiver, name: str) -> list[str]:
    return [text(e) for e in loki.entries() if e.labels.get("container") == name]
