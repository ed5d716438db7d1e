"""Families made from their declarations (protocol/metrics.py): an empty one by name, and one
filled from a worker's status by its declared `field` alone. Reading never fails on a status of
the wrong shape (a worker of another release, a figure missing): what is not a number or not a
declared word adds no sample. Label values are cut to 128 characters, lists to MAX_ITEMS."""

from __future__ import annotations

from functools import cache
from typing import Any, TypeVar, overload

from faden_agent.protocol import metrics as declarations
from faden_agent.protocol.metrics import MAX_ITEMS, PREFIX, Metric
from faden_agent.supervisor.metrics.exposition import (
    CounterMetricFamily,
    Family,
    GaugeMetricFamily,
    HistogramMetricFamily,
    InfoMetricFamily,
)

KINDS: dict[str, type[Family]] = {
    "counter": CounterMetricFamily,
    "gauge": GaugeMetricFamily,
    "histogram": HistogramMetricFamily,
    "info": InfoMetricFamily,
}
MAX_LABEL = 128
F = TypeVar("F", bound=Family)


@overload
def new(name: str) -> Family: ...
@overload
def new(name: str, kind: type[F]) -> F: ...
def new(name: str, kind: type[Family] = Family) -> Family:
    """The declared family `name`, without samples (`kind`: the class its producer fills)."""
    metric = declarations.BY_NAME[name]
    made = KINDS[metric.type](PREFIX + metric.name, metric.help, labels=metric.labels)
    if not isinstance(made, kind):
        raise TypeError(f"metric {name} is declared a {metric.type}, not a {kind.__name__}")
    return made


def number(value: Any) -> float | None:
    """A figure as a float; anything else (a bool, text, None, a list) is no figure."""
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def as_dict(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def label(value: Any) -> str:
    return "" if value is None else str(value)[:MAX_LABEL]


class Path:
    """A declared field parsed: the steps to a list (`a[]`), then to a number, a word, or a
    dict whose keys make the last label (`*`) with the steps from each key's value."""

    def __init__(self, field: str):
        head, sep, rest = field.partition("[].")
        self.items = head.split(".") if sep else None
        rest = rest if sep else field
        before, star, after = rest.partition("*")
        self.keyed = bool(star)
        self.steps = [step for step in before.split(".") if step]
        self.after = [step for step in after.split(".") if step]

    def where(self, status: dict[str, Any]) -> list[tuple[dict[str, Any], Any]]:
        """(item or the status itself, value at the path) pairs."""
        roots = [status]
        if self.items is not None:
            found = walk(status, self.items)
            roots = [as_dict(item) for item in (found if isinstance(found, list) else [])[:MAX_ITEMS]]
        return [(root, walk(root, self.steps)) for root in roots]


def walk(value: Any, steps: list[str]) -> Any:
    for step in steps:
        value = as_dict(value).get(step)
    return value


@cache
def path_of(field: str) -> Path:
    return Path(field)


def lead_keys(metric: Metric) -> tuple[str, ...]:
    """The item keys behind the labels before a state's word or a dict's key."""
    if metric.item_labels:
        return metric.item_labels
    return metric.labels[: len(metric.labels) - (1 if metric.states or path_of(metric.field).keyed else 0)]


def read(metric: Metric, status: dict[str, Any]) -> Family:
    """The family filled from `status` (its source's) by its declared field."""
    family, path, keys = new(metric.name), path_of(metric.field), lead_keys(metric)
    for root, value in path.where(status):
        lead = [label(root.get(key)) for key in keys] if path.items is not None else []
        if metric.states:
            if value in metric.states or metric.absent is not None:
                for word in metric.states:  # no word: each of them `absent`
                    family.add_metric([*lead, word], 1.0 if value == word else metric.absent or 0.0)
        elif path.keyed:
            for key, under in as_dict(value).items():
                if (figure := number(walk(under, path.after))) is not None or (figure := metric.absent) is not None:
                    family.add_metric([*lead, label(key)], figure * metric.scale)
        elif metric.flag:
            family.add_metric(lead, 1.0 if value else 0.0)
        elif (figure := number(value)) is not None or (figure := metric.absent) is not None:
            family.add_metric(lead, figure * metric.scale)
    return family
