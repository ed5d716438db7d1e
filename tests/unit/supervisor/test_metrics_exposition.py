"""The exposition writers (text 0.0.4 and OpenMetrics 1.0) against prometheus_client's own parsers:
the same samples in both, histograms, escaped label values and help."""

from __future__ import annotations

import pytest
from prometheus_client.openmetrics.parser import text_string_to_metric_families as openmetrics_families
from prometheus_client.parser import text_string_to_metric_families

from faden_agent.protocol.histogram import Histogram
from faden_agent.supervisor.metrics.exposition import openmetrics_1_0, text_0_0_4
from faden_agent.supervisor.metrics.families import families
from tests.support.metricstables import full_table, render, value


def test_histogram_buckets_and_its_exposition():
    hist = Histogram((0.1, 1.0))
    for seconds in (0.05, 0.1, 0.5, 3.0):
        hist.observe(seconds)
    snap = hist.snapshot()
    assert snap["counts"] == [2, 1, 1] and snap["sum"] == pytest.approx(3.65)
    samples = render({"workers": [{"name": "logs", "state": "RUNNING", "status": {"push_seconds": snap}}]})
    assert value(samples, "faden_agent_log_push_duration_seconds_bucket", le="0.1") == 2
    assert value(samples, "faden_agent_log_push_duration_seconds_bucket", le="1.0") == 3
    assert value(samples, "faden_agent_log_push_duration_seconds_bucket", le="+Inf") == 4
    assert value(samples, "faden_agent_log_push_duration_seconds_count") == 4


def test_both_formats_parse_with_prometheus_own_parsers_to_the_same_samples():
    """The hand-written writer against prometheus_client's parsers (the OpenMetrics one is strict)."""
    produced = list(families(full_table(), {"supervisor": (1.5, 4096, None), "logs": (0.1, 10, 20)}))
    text = {
        (s.name, tuple(sorted(s.labels.items())), s.value)
        for f in text_string_to_metric_families(text_0_0_4(produced).decode())
        for s in f.samples
    }
    om_families = list(openmetrics_families(openmetrics_1_0(produced).decode()))
    om = {(s.name, tuple(sorted(s.labels.items())), s.value) for f in om_families for s in f.samples}
    assert text == om and len(text) > 80
    types = {f.name: f.type for f in om_families}
    assert types["faden_agent_build"] == "info" and types["faden_agent_worker_restarts"] == "counter"
    assert types["faden_agent_log_push_duration_seconds"] == "histogram"
    assert ("faden_agent_worker_state", (("state", "FATAL"), ("worker", "logs")), 1.0) in text


def test_label_values_and_help_are_escaped():
    from faden_agent.supervisor.metrics.exposition import GaugeMetricFamily

    family = GaugeMetricFamily("faden_agent_x", 'help with \\ and "quotes"\nand a newline', labels=["path"])
    family.add_metric(['/odd "dir"\\with\nnewline'], float("inf"))
    for body in (text_0_0_4([family]), openmetrics_1_0([family])):
        parse = openmetrics_families if body.endswith(b"# EOF\n") else text_string_to_metric_families
        (parsed,) = list(parse(body.decode()))
        assert parsed.samples[0].labels["path"] == '/odd "dir"\\with\nnewline'
        assert parsed.samples[0].value == float("inf")
