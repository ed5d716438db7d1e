"""The metrics endpoint's address setting: host:port forms, refusals, the default port, off."""

from __future__ import annotations

import pytest

from faden_agent.config import _listen_addr, listen_host_port


@pytest.mark.parametrize(
    "raw, parsed",
    [("127.0.0.1:9481", ("127.0.0.1", 9481)), ("[::1]:0", ("::1", 0)), ("0.0.0.0:80", ("0.0.0.0", 80))],
)
def test_listen_addresses(raw, parsed):
    assert listen_host_port(_listen_addr(raw)) == parsed


@pytest.mark.parametrize("raw", ["9464", "host", ":9464", "a b:1", "127.0.0.1:65536", "127.0.0.1:x", "[::1:9"])
def test_bad_listen_addresses_are_refused(raw):
    with pytest.raises(ValueError):
        _listen_addr(raw)


def test_the_default_address_is_not_opentelemetry_s_prometheus_port():
    from faden_agent.config import load_config

    assert load_config({}).metrics_addr == "127.0.0.1:9481"  # 9464: OpenTelemetry's exporter


def test_off_and_empty_mean_no_endpoint():
    assert _listen_addr("off") is None and _listen_addr(" OFF ") is None and _listen_addr("") is None
