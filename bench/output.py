"""A bench's figures: as JSON, printed and written to --json PATH when given; or as its table
of rows (figure, value, compared with) printed and the whole JSON written."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any


def emit(figures: dict[str, Any], path: Path | None) -> None:
    text = json.dumps(figures, indent=2)
    print(text)
    if path:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text + "\n")


def table_and_json(results: dict[str, Any], report: Callable[..., None], path: Path) -> None:
    """report(results, row) prints the table; everything measured goes to `path`."""
    report(results, lambda f, v, c="": print(f"{f:<46} {v:<30} {c}", flush=True))
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(results, indent=2) + "\n")
