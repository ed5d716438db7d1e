"""The README's variable table, rendered from config.py's VARIABLES (the one declaration of each
setting). `python -m faden_agent.cli.config_table --write README.md` rewrites the table between its
marker comments in place; without --write it prints the table. A help that would break a cell
(a `|`, a line break) or a secret that would show a default fails, naming the variable."""

from __future__ import annotations

import sys
from collections.abc import Iterable

from faden_agent.cli import doctable
from faden_agent.cli.doctable import cells_row
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
    return cells_row(name, (f"`{name}`", default_cell(var), meaning_cell(var)))


def render(variables: Iterable[Variable] = VARIABLES) -> str:
    return "\n".join([HEADER, *(row(var) for var in variables)])


def with_table(text: str, variables: Iterable[Variable] = VARIABLES) -> str:
    """`text` with the table between BEGIN and END replaced by the rendered one."""
    return doctable.with_table(text, BEGIN, END, render(variables), "variable table")


def main(argv: list[str] | None = None) -> int:
    return doctable.main(argv, "python -m faden_agent.cli.config_table", __doc__, render, with_table, "variable table")


if __name__ == "__main__":
    sys.exit(main())
