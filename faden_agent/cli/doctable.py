"""A generated Markdown table kept in a document between two marker comments: replaced in
place by `--write FILE`, printed without it. config_table.py (the README's settings),
metrics_table.py (docs/service.md's metric families) and capabilities_table.py
(docs/protocol.md's capabilities) are its users."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from pathlib import Path


def markers(module: str, source: str, doc: str, what: str) -> tuple[str, str, str]:
    """(the command that rewrites the table, its begin marker, its end marker)."""
    command = f"python -m faden_agent.cli.{module} --write {doc}"
    return command, f"<!-- {what}: generated from {source}; edit there, then run: {command} -->", f"<!-- /{what} -->"


def cells_row(name: str, cells: tuple[str, ...]) -> str:
    """One table row; a cell that is empty or would break the table (a `|`, a line break) fails, naming `name`."""
    if any("|" in cell or "\n" in cell or not cell.strip() for cell in cells):
        raise ValueError(f"{name}: a cell of its row is empty or holds a '|' or a line break")
    return "| " + " | ".join(cells) + " |"


def with_table(text: str, begin: str, end: str, table: str, what: str) -> str:
    """`text` with the lines between `begin` and `end` replaced by `table`."""
    start, stop = text.find(begin), text.find(end)
    if start < 0 or stop < start:
        raise ValueError(f"no {what} markers: a line {begin!r}, later a line {end!r}")
    # the blank line ends the table for every renderer: GFM would take a next line as one more row
    return text[: start + len(begin)] + "\n" + table + "\n\n" + text[stop:]


def main(
    argv: list[str] | None, prog: str, doc: str, render: Callable[[], str], rewrite: Callable[[str], str], what: str
) -> int:
    parser = argparse.ArgumentParser(prog=prog, description=doc)
    parser.add_argument("--write", type=Path, metavar="FILE", help="rewrite the table in this file in place")
    args = parser.parse_args(argv)
    name = prog.rsplit(".", 1)[-1]
    try:
        if args.write is None:
            print(render())
            return 0
        text = args.write.read_text()
        new = rewrite(text)
    except (OSError, ValueError) as exc:
        print(f"{name}: {exc}", file=sys.stderr)
        return 1
    if new != text:
        args.write.write_text(new)
    print(f"{args.write}: {what} {'rewritten' if new != text else 'already current'}")
    return 0
