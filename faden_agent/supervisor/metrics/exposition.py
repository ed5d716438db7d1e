"""A minimal writer of Prometheus' text format 0.0.4 and OpenMetrics 1.0.

Metric families with prometheus_client's constructor and add_metric() shapes, written by
hand: a scrape a second must cost the supervisor well under a millisecond and no import
(docs/benchmarks.md, "Metrics"). Names are the caller's (valid, bounded); values escaped.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Iterator, Sequence

TEXT_0_0_4 = "text/plain; version=0.0.4; charset=utf-8"
OPENMETRICS_1_0 = "application/openmetrics-text; version=1.0.0; charset=utf-8"


class Family:
    kind = "untyped"
    suffix = ""

    def __init__(self, name: str, documentation: str, labels: Sequence[str] = ()):
        self.name = name
        self.documentation = documentation
        self.labels = tuple(labels)
        self.samples: list[tuple[str, tuple[tuple[str, str], ...], float]] = []  # (suffix, labels, value)
        self.written: dict[str, bytes] = {}  # format -> text: a family reused between scrapes is written once

    def add_metric(self, values: Sequence[str], value: float) -> None:
        self.samples.append((self.suffix, tuple(zip(self.labels, values, strict=True)), value))


class GaugeMetricFamily(Family):
    kind = "gauge"


class CounterMetricFamily(Family):
    kind = "counter"
    suffix = "_total"


class InfoMetricFamily(Family):
    kind = "info"

    def add_metric(self, values: Sequence[str], value: dict[str, str]) -> None:  # type: ignore[override]
        pairs = (*zip(self.labels, values, strict=True), *sorted(value.items()))
        self.samples.append(("_info", pairs, 1.0))


class HistogramMetricFamily(Family):
    kind = "histogram"

    def add_metric(  # type: ignore[override]
        self, values: Sequence[str], buckets: Sequence[tuple[str, float]], sum_value: float
    ) -> None:
        labels = tuple(zip(self.labels, values, strict=True))
        for bound, count in buckets:
            self.samples.append(("_bucket", (*labels, ("le", bound)), count))
        self.samples.append(("_count", labels, buckets[-1][1] if buckets else 0.0))
        self.samples.append(("_sum", labels, sum_value))


class Section(list[Family]):
    """Families written as one text, once per format: a section reused between scrapes."""

    def __init__(self, families: Iterable[Family] = ()):
        super().__init__(families)
        self.written: dict[str, bytes] = {}


class Gauges(Section):
    """One gauge of one label written straight from (label value, number) pairs in the text
    format, for figures that move every scrape: no Family built and walked (one is made only
    when it is iterated, or asked for OpenMetrics)."""

    def __init__(self, template: Family, pairs: list[tuple[str, float]]):
        super().__init__()
        self.template, self.pairs = template, pairs
        label = template.labels[0]
        lines = [f"{template.name}{_labels(((label, value),))} {_value(number)}\n" for value, number in pairs]
        self.written["0.0.4"] = (_header(template, "0.0.4", _text_0_0_4) + "".join(lines)).encode()

    def __iter__(self) -> Iterator[Family]:
        family = GaugeMetricFamily(self.template.name, self.template.documentation, self.template.labels)
        for value, number in self.pairs:
            family.add_metric([value], number)
        return iter([family])


def _value(value: float) -> str:
    value = float(value)
    if value - value == 0:  # finite (inf - inf and nan - nan are nan)
        return repr(value)
    return "NaN" if math.isnan(value) else "+Inf" if value > 0 else "-Inf"


def _label(value: str) -> str:
    return value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


_LABEL_SETS: dict[tuple[tuple[str, str], ...], str] = {}  # the same few hundred every scrape
MAX_LABEL_SETS = 4096


def _labels(pairs: tuple[tuple[str, str], ...]) -> str:
    text = _LABEL_SETS.get(pairs)
    if text is None:
        if len(_LABEL_SETS) >= MAX_LABEL_SETS:
            _LABEL_SETS.clear()
        inner = ",".join(f'{key}="{_label(str(value))}"' for key, value in pairs)
        text = _LABEL_SETS[pairs] = "{" + inner + "}" if pairs else ""
    return text


def _samples(family: Family) -> str:
    name = family.name
    return "".join(f"{name}{suffix}{_labels(labels)} {_value(value)}\n" for suffix, labels, value in family.samples)


def text_0_0_4(parts: Iterable[Family | Section]) -> bytes:
    return b"".join([_written(part, "0.0.4", _text_0_0_4) for part in parts])


def openmetrics_1_0(parts: Iterable[Family | Section]) -> bytes:
    return b"".join([*(_written(part, "om1", _openmetrics_1_0) for part in parts), b"# EOF\n"])


def _written(part: Family | Section, form: str, write: Callable[[Family], str]) -> bytes:
    text = part.written.get(form)
    if text is None:
        if isinstance(part, Section):
            text = b"".join([_written(family, form, write) for family in part])
        else:
            text = (_header(part, form, write) + _samples(part)).encode()
        part.written[form] = text
    return text


_HEADERS: dict[tuple[str, str, str, str], str] = {}  # a rebuilt family's HELP and TYPE are as before


def _header(family: Family, form: str, write: Callable[[Family], str]) -> str:
    key = (form, family.name, family.kind, family.documentation)
    text = _HEADERS.get(key)
    if text is None:
        if len(_HEADERS) >= MAX_LABEL_SETS:
            _HEADERS.clear()
        text = _HEADERS[key] = write(family)
    return text


def _text_0_0_4(family: Family) -> str:
    # This format has no info type, and names a counter's family by its sample name.
    kind = "gauge" if family.kind == "info" else family.kind
    shown = family.name + {"counter": "_total", "info": "_info"}.get(family.kind, "")
    help_text = family.documentation.replace("\\", "\\\\").replace("\n", "\\n")
    return f"# HELP {shown} {help_text}\n# TYPE {shown} {kind}\n"


def _openmetrics_1_0(family: Family) -> str:
    return f"# HELP {family.name} {_label(family.documentation)}\n# TYPE {family.name} {family.kind}\n"
