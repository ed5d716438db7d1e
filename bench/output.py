"""A bench's figures as JSON: printed, and written to --json PATH when given."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any


def emit(figures: dict[str, Any], path: Path | None) -> None:
    text = json.dumps(figures, indent=2)
    print(text)
    if path:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text + "\n")
