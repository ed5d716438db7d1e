"""One logging format for the supervisor and the workers (stderr; journald adds the rest)."""

from __future__ import annotations

import logging
import sys

from faden_agent.redact import RedactingFormatter


def configure_logging(level: str, process_name: str) -> None:
    root = logging.getLogger()
    for handler in list(root.handlers):
        root.removeHandler(handler)
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(  # URL credentials (a Loki URL's user:key) never reach the journal
        RedactingFormatter(f"%(asctime)s {process_name}[%(process)d] %(levelname)s %(name)s: %(message)s")
    )
    root.addHandler(handler)
    root.setLevel(level.upper())
    # The docker SDK and urllib3 log request URLs at debug; keep them quiet unless asked.
    for noisy in ("urllib3", "docker"):
        logging.getLogger(noisy).setLevel(max(logging.INFO, root.level))
