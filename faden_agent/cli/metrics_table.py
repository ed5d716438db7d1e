"""docs/service.md's table of metric families, rendered from protocol/metrics.py's METRICS
(the one declaration of each). `python -m faden_agent.cli.metrics_table --write docs/service.md`
rewrites the table between its marker comments in place; without --write it prints it."""

from __future__ import annotations

import sys
from collections.abc import Iterable

from faden_agent.cli import doctable
from faden_agent.protocol.metrics import METRICS, PREFIX, Metric

COMMAND = "python -m faden_agent.cli.metrics_table --write docs/service.md"
BEGIN = f"<!-- metrics: generated from faden_agent/protocol/metrics.py; edit there, then run: {COMMAND} -->"
END = "<!-- /metrics -->"
HEADER = "| family | type | labels | what |\n| --- | --- | --- | --- |"


def what_cell(metric: Metric) -> str:
    if metric.deprecated:
        new = BY_EXPOSED[metric.deprecated]
        return f"**deprecated**: the old name of `{new}`, still sent in this release, removed in the next"
    return metric.doc or metric.help


def row(metric: Metric) -> str:
    shown = metric.exposed.removeprefix(PREFIX)
    labels = ", ".join((*metric.labels, *metric.info_keys)) or "-"
    return doctable.cells_row(metric.name, (f"`{shown}`", metric.type, labels, what_cell(metric)))


BY_EXPOSED = {metric.name: metric.exposed.removeprefix(PREFIX) for metric in METRICS}


def render(metrics: Iterable[Metric] = METRICS) -> str:
    return "\n".join([HEADER, *(row(metric) for metric in metrics)])


def with_table(text: str) -> str:
    """`text` with the table between BEGIN and END replaced by the rendered one."""
    return doctable.with_table(text, BEGIN, END, render(), "metrics table")


def main(argv: list[str] | None = None) -> int:
    return doctable.main(argv, "python -m faden_agent.cli.metrics_table", __doc__, render, with_table, "metrics table")


if __name__ == "__main__":
    sys.exit(main())
