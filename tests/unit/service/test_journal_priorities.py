"""sd-daemon(3) priority prefixes: on every line (a traceback's too) when stderr is the
stream $JOURNAL_STREAM names, never otherwise (a terminal, a file, an inherited variable
whose stream is not stderr any more). Real processes writing to real files."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from tests.support.agentproc import agent_env

LOGS = textwrap.dedent(
    """
    import logging
    from faden_agent.common.logsetup import configure_logging
    configure_logging("debug", "faden-agent")
    log = logging.getLogger("faden_agent.test")
    log.debug("a debug line")
    log.info("an info line")
    log.warning("a warning")
    log.error("an error")
    log.critical("a critical one")
    try:
        raise RuntimeError("boom")
    except RuntimeError:
        log.exception("it failed")
    """
)


def stream_id(path: Path) -> str:
    status = path.stat()
    return f"{status.st_dev}:{status.st_ino}"


def run_logging(stderr_file: Path, journal_stream: str | None, code: str = LOGS, env: dict | None = None) -> list[str]:
    env = dict(env or os.environ)
    env.pop("JOURNAL_STREAM", None)
    if journal_stream is not None:
        env["JOURNAL_STREAM"] = journal_stream
    with stderr_file.open("wb") as err:
        subprocess.run([sys.executable, "-c", code], stderr=err, env=env, timeout=60)
    return stderr_file.read_text().splitlines()


def test_under_systemd_every_line_carries_its_priority(tmp_path):
    err = tmp_path / "stderr"
    err.touch()
    lines = run_logging(err, stream_id(err))
    prefixes = [line[:3] for line in lines]
    assert prefixes[:5] == ["<7>", "<6>", "<4>", "<3>", "<2>"], lines
    assert " ERROR faden_agent.test: an error" in lines[3]
    # The traceback's lines are the error's too: `journalctl -p err` shows it whole.
    traceback = lines[5:]
    assert len(traceback) >= 4 and all(line.startswith("<3>") for line in traceback), traceback
    assert traceback[-1] == "<3>RuntimeError: boom"


@pytest.mark.parametrize("journal_stream", [None, "", "12:34", "x:y", "1:"])
def test_elsewhere_lines_stay_plain(tmp_path, journal_stream):
    err = tmp_path / "stderr"
    lines = run_logging(err, journal_stream)
    assert lines and not any(line.startswith("<") for line in lines), lines
    assert lines[3].endswith("ERROR faden_agent.test: an error")


def test_an_inherited_variable_naming_another_stream_does_not_prefix(tmp_path):
    """A child whose stderr was redirected keeps $JOURNAL_STREAM: its lines stay plain."""
    journal = tmp_path / "journal-stream"
    journal.touch()
    lines = run_logging(tmp_path / "stderr", stream_id(journal))
    assert not any(line.startswith("<") for line in lines), lines


def test_a_bad_setting_is_an_error_line_for_the_journal(tmp_path):
    err = tmp_path / "stderr"
    err.touch()
    env = agent_env(tmp_path, heartbeat_interval_sec="soon")
    code = "import sys; from faden_agent.cli.launch import run_agent; sys.exit(run_agent())"
    env.pop("JOURNAL_STREAM", None)
    env["JOURNAL_STREAM"] = stream_id(err)
    with err.open("wb") as out:
        done = subprocess.run([sys.executable, "-c", code], stderr=out, env=env, timeout=60)
    assert done.returncode == 2
    (line,) = err.read_text().splitlines()
    assert line.startswith("<3>faden-agent: FADEN_NODE_AGENT_HEARTBEAT_INTERVAL_SEC='soon' is not allowed"), line
