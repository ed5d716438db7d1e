"""The README's variable table, rendered from config.py's VARIABLES (the one declaration of each
setting). `python -m faden_agent.cli.config_table --write README.md` rewrites the table between its
marker comments in place; without --write it prints the table. A help that would break a cell
(a `|`, a line break) or a secret that would show a default fails, naming the variable."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Iterable
from pathlib import Path

from faden_agent.config import VARIABLES, Variable, env_name

COMMAND = "python -m faden_agent.cli.config_table --write README.md"
BEGIN = f"<!-- variables: generated from faden_agent/config.py; edit there, then run: {COMMAND} -->"
END = "<!-- /variables -->"
HEADER = "| variable | default | meaning |\n| --- | --- | --- |"


def default_cell(var: Variable) -> str:
    if var.default is None:
        return var.default_words or "unset"
    if var.default == "":
        return "empty"
    return f"`{var.default}` ({var.default_words})" if var.default_words else f"`{var.default}`"


def meaning_cell(var: Variable) -> str:
    text = var.help + (" (secret)" if var.secret else "")
    if var.old_fields:
        plural = "s" if len(var.old_fields) > 1 else ""
        names = ", ".join(f"`{env_name(old)}`" for old in var.old_fields)
        text += f". Old name{plural}, still read when this one is unset: {names}"
    return text


def row(var: Variable) -> str:
    name = env_name(var.field)
    if var.secret and (var.default is not None or var.default_words):
        raise ValueError(f"{name} is a secret: it must not show a default in the README")
    cells = (f"`{name}`", default_cell(var), meaning_cell(var))
    if any("|" in cell or "\n" in cell or not cell.strip() for cell in cells):
        raise ValueError(f"{name}: its default words or help are empty or hold a '|' or a line break")
    return "| " + " | ".join(cells) + " |"


def render(variables: Iterable[Variable] = VARIABLES) -> str:
    return "\n".join([HEADER, *(row(var) for var in variables)])


def with_table(text: str, variables: Iterable[Variable] = VARIABLES) -> str:
    """`text` with the table between BEGIN and END replaced by the rendered one."""
    start, end = text.find(BEGIN), text.find(END)
    if start < 0 or end < start:
        raise ValueError(f"no variable table markers: a line {BEGIN!r}, later a line {END!r}")
    # the blank line ends the table for every renderer: GFM would take a next line as one more row
    return text[: start + len(BEGIN)] + "\n" + render(variables) + "\n\n" + text[end:]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m faden_agent.cli.config_table", description=__doc__)
    parser.add_argument("--write", type=Path, metavar="README", help="rewrite the table in this file in place")
    args = parser.parse_args(argv)
    try:
        if args.write is None:
            print(render())
            return 0
        text = args.write.read_text()
        new = with_table(text)
    except (OSError, ValueError) as exc:
        print(f"config_table: {exc}", file=sys.stderr)
        return 1
    if new != text:
        args.write.write_text(new)
    print(f"{args.write}: variable table {'rewritten' if new != text else 'already current'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
