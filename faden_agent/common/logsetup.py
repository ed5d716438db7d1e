"""One logging format for the supervisor and the workers (stderr; journald adds the rest).

Under systemd (stderr is the stream $JOURNAL_STREAM names) each line starts with its
sd-daemon(3) priority, `<3>` for an error, so `journalctl -p err` finds it and the shipper
labels it; elsewhere (a terminal, a file, `docker run`) lines stay plain.
"""

from __future__ import annotations

import logging
import os
import sys
from collections.abc import Mapping
from typing import TextIO

from faden_agent.common.redact import RedactingFormatter

# syslog priorities of sd-daemon(3)'s SD_CRIT .. SD_DEBUG, by logging level (the next one up).
PRIORITIES = ((logging.DEBUG, 7), (logging.INFO, 6), (logging.WARNING, 4), (logging.ERROR, 3))


def priority(levelno: int) -> int:
    for threshold, value in PRIORITIES:
        if levelno <= threshold:
            return value
    return 2  # CRITICAL and above


def stderr_is_journal(environ: Mapping[str, str] | None = None, stream: TextIO | None = None) -> bool:
    """Whether stderr is still the stream systemd connected to the journal: JOURNAL_STREAM
    ("dev:inode") is inherited, so a process whose stderr went elsewhere must not prefix."""
    device, _, inode = (os.environ if environ is None else environ).get("JOURNAL_STREAM", "").partition(":")
    if not (device.isdigit() and inode.isdigit()):
        return False
    try:
        status = os.fstat((stream or sys.stderr).fileno())
    except (OSError, ValueError, AttributeError):  # closed, or not a file (a test's StringIO)
        return False
    return (status.st_dev, status.st_ino) == (int(device), int(inode))


def journal_prefix(levelno: int) -> str:
    """`<N>` for a line at this level when stderr goes to the journal, else nothing."""
    return f"<{priority(levelno)}>" if stderr_is_journal() else ""


class JournalFormatter(RedactingFormatter):
    """Every line of the record (a traceback's too) with the record's priority: journald
    reads the prefix per line."""

    def format(self, record: logging.LogRecord) -> str:
        prefix = f"<{priority(record.levelno)}>"
        return "\n".join(prefix + line for line in super().format(record).split("\n"))


def configure_logging(level: str, process_name: str) -> None:
    root = logging.getLogger()
    for handler in list(root.handlers):
        root.removeHandler(handler)
    handler = logging.StreamHandler(sys.stderr)
    form = JournalFormatter if stderr_is_journal() else RedactingFormatter
    handler.setFormatter(  # URL credentials (a Loki URL's user:key) never reach the journal
        form(f"%(asctime)s {process_name}[%(process)d] %(levelname)s %(name)s: %(message)s")
    )
    root.addHandler(handler)
    set_level(root, logging.getLevelName(level.upper()))
    # The docker SDK and urllib3 log request URLs at debug; keep them quiet unless asked.
    for noisy in ("urllib3", "docker"):
        set_level(logging.getLogger(noisy), max(logging.INFO, root.level))


def set_level(logger: logging.Logger, level: int | str) -> None:
    """setLevel unless the logger has that level already: setLevel empties every logger's
    level cache, which a forked worker would otherwise write into the supervisor's pages."""
    if logger.level != level:
        logger.setLevel(level)
