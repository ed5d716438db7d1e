"""docs/protocol.md's table of capabilities, rendered from protocol/capabilities.py (the one
declaration of each). `python -m faden_agent.cli.capabilities_table --write docs/protocol.md`
rewrites the table between its marker comments in place; without --write it prints it."""

from __future__ import annotations

import sys
from collections.abc import Iterable

from faden_agent.cli import doctable
from faden_agent.protocol.capabilities import DECLARED, FIRST_RELEASE, FIRST_RELEASE_CAPABILITIES, Capability

COMMAND, BEGIN, END = doctable.markers(
    "capabilities_table", "faden_agent/protocol/capabilities.py", "docs/protocol.md", "capabilities"
)
HEADER = "| capability | since | brings | what an agent reporting it does or takes |\n| --- | --- | --- | --- |"


def brings_cell(capability: Capability) -> str:
    parts = [f"kind `{kind}` ({', '.join(f'`{k}`' for k in keys)})" for kind, keys in capability.kinds.items()]
    parts += [f"`{kind}`: {', '.join(f'`{k}`' for k in keys)}" for kind, keys in capability.keys.items()]
    return "; ".join(parts) or "-"


def row(capability: Capability) -> str:
    cells = (
        f"`{capability.name}`",
        f"{capability.since} ({capability.commit})",
        brings_cell(capability),
        capability.means,
    )
    return doctable.cells_row(capability.name, cells)


def render(capabilities: Iterable[Capability] = DECLARED) -> str:
    first = ", ".join(f"`{name}`" for name in FIRST_RELEASE_CAPABILITIES)
    lead = f"| {first} | {FIRST_RELEASE} | the first release's kinds and keys | - |"
    return "\n".join([HEADER, lead, *(row(capability) for capability in capabilities)])


def with_table(text: str) -> str:
    """`text` with the table between BEGIN and END replaced by the rendered one."""
    return doctable.with_table(text, BEGIN, END, render(), "capabilities table")


def main(argv: list[str] | None = None) -> int:
    return doctable.main(
        argv, "python -m faden_agent.cli.capabilities_table", __doc__, render, with_table, "capabilities table"
    )


if __name__ == "__main__":
    sys.exit(main())
