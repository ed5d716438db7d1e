"""Every configuration rule: exact defaults, computed defaults, one clear line per bad value."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from faden_agent.config import Config, ConfigError, config_fields, load_config, route_address

TOKEN = "tok-SECRET-0123456789"


def load(**env):
    return load_config({f"FADEN_NODE_AGENT_{k}": v for k, v in env.items()})


def test_exact_defaults():
    config = load()
    assert config.backend_url == "http://127.0.0.1:8000"
    assert config.agent_id == socket.gethostname()
    assert config.advertise_scheme == "http"
    assert config.enrollment_token is None
    assert config.heartbeat_interval_sec == 15
    assert config.inventory_interval_sec == 60
    assert config.reconnect_min_sec == 2
    assert config.reconnect_max_sec == 30
    assert config.request_timeout_sec == 20
    assert config.verify_tls is True
    assert config.loki_url is None
    assert config.log_batch_size == 1000
    assert config.log_flush_interval_sec == 5
    expected_state = (
        "/var/lib/faden-agent/state.json"
        if os.geteuid() == 0
        else str(Path.home() / ".local/share/faden-agent/state.json")
    )
    assert str(config.state_path) == expected_state


def test_host_defaults_to_the_route_address_to_the_backend():
    config = load()
    # the backend is on loopback by default, so the kernel picks 127.0.0.1
    assert config.host == "127.0.0.1"
    assert config.advertise_host == "127.0.0.1"
    assert route_address("http://127.0.0.2:8000") == "127.0.0.1"


def test_host_falls_back_to_hostname_when_there_is_no_route():
    config = load(BACKEND_URL="http://no-such-host.invalid:8000")
    assert config.host == socket.gethostname()
    assert config.advertise_host == socket.gethostname()


def test_advertise_host_defaults_to_host_when_there_is_no_route():
    config = load(BACKEND_URL="http://no-such-host.invalid:8000", HOST="10.9.8.7")
    assert config.advertise_host == "10.9.8.7"


def test_explicit_values_win():
    config = load(
        AGENT_ID="gpu-01",
        HOST="h",
        ADVERTISE_HOST="a",
        ADVERTISE_SCHEME="https",
        VERIFY_TLS="false",
        HEARTBEAT_INTERVAL_SEC="2.5",
        LOG_BATCH_SIZE="7",
        LOKI_URL="http://127.0.0.1:3100/",
    )
    assert (config.agent_id, config.host, config.advertise_host, config.advertise_scheme) == (
        "gpu-01",
        "h",
        "a",
        "https",
    )
    assert config.verify_tls is False and config.tls_verify() is False
    assert config.heartbeat_interval_sec == 2.5
    assert config.log_batch_size == 7
    assert config.loki_url == "http://127.0.0.1:3100"


@pytest.mark.parametrize(
    "name, value, allowed",
    [
        ("ADVERTISE_SCHEME", "ftp", "one of http, https"),
        ("HEARTBEAT_INTERVAL_SEC", "-1", "a positive number of seconds"),
        ("HEARTBEAT_INTERVAL_SEC", "soon", "a positive number of seconds"),
        ("INVENTORY_INTERVAL_SEC", "0", "a positive number of seconds"),
        ("RECONNECT_MIN_SEC", "nan", "a positive number of seconds"),
        ("REQUEST_TIMEOUT_SEC", "inf", "a positive number of seconds"),
        ("LOG_BATCH_SIZE", "1.5", "a positive whole number"),
        ("BACKEND_URL", "backend.example:8000", "an http:// or https:// URL with a host"),
        ("BACKEND_URL", "ftp://backend.example", "an http:// or https:// URL with a host"),
        ("LOKI_URL", "loki:3100", "an http:// or https:// URL with a host"),
        ("VERIFY_TLS", "maybe", "one of true, false"),
        ("LOG_LEVEL", "loud", "one of debug, info, warning, error"),
    ],
)
def test_bad_values_name_variable_value_and_what_is_allowed(name, value, allowed):
    with pytest.raises(ConfigError) as info:
        load(**{name: value})
    message = str(info.value)
    assert "\n" not in message
    assert f"FADEN_NODE_AGENT_{name}={value!r}" in message
    assert allowed in message


def test_reconnect_min_above_max_is_refused():
    with pytest.raises(
        ConfigError, match="FADEN_NODE_AGENT_RECONNECT_MIN_SEC=40 is larger than FADEN_NODE_AGENT_RECONNECT_MAX_SEC=30"
    ):
        load(RECONNECT_MIN_SEC="40")


def test_missing_ca_bundle_is_named(tmp_path):
    with pytest.raises(ConfigError, match=r"FADEN_NODE_AGENT_CA_BUNDLE=.*no such file"):
        load(CA_BUNDLE=str(tmp_path / "missing.pem"))


def test_token_never_appears_in_messages_or_redacted_output():
    with pytest.raises(ConfigError) as info:
        load(ENROLLMENT_TOKEN=TOKEN, HEARTBEAT_INTERVAL_SEC="x")
    assert TOKEN not in str(info.value)
    config = load(ENROLLMENT_TOKEN=TOKEN)
    assert config.token() == TOKEN
    assert TOKEN not in repr(config.redacted())
    assert config.redacted()["FADEN_NODE_AGENT_ENROLLMENT_TOKEN"] == "<redacted>"


def test_token_file_is_read(tmp_path):
    path = tmp_path / "token"
    path.write_text(TOKEN + "\n")
    assert load(ENROLLMENT_TOKEN_FILE=str(path)).token() == TOKEN
    with pytest.raises(ConfigError, match="cannot read the token file"):
        load(ENROLLMENT_TOKEN_FILE=str(tmp_path / "absent")).token()


def test_config_is_immutable():
    config = load()
    with pytest.raises(AttributeError, match="it is frozen"):
        config.agent_id = "other"  # type: ignore[misc]
    with pytest.raises(AttributeError, match="it is frozen"):
        del config.agent_id
    assert config.agent_id != "other"


def test_config_takes_every_field_and_no_other():
    fields = {name: getattr(load(), name) for name in config_fields()}
    assert Config(**fields).backend_url == fields["backend_url"]
    with pytest.raises(TypeError, match=r"missing \['backend_url'\], unknown \[\]"):
        Config(**{name: value for name, value in fields.items() if name != "backend_url"})
    with pytest.raises(TypeError, match=r"unknown \['no_such_field'\]"):
        Config(**fields, no_such_field=1)


def run_cli(*args, **env):
    full = {k: v for k, v in os.environ.items() if not k.startswith("FADEN_NODE_AGENT_")}
    full.update({f"FADEN_NODE_AGENT_{k}": v for k, v in env.items()})
    return subprocess.run(
        [sys.executable, "-m", "faden_agent", *args], env=full, capture_output=True, text=True, timeout=30
    )


def test_cli_config_redacts_and_fails_with_one_line():
    out = run_cli("config", "--json", ENROLLMENT_TOKEN=TOKEN)
    assert out.returncode == 0
    assert TOKEN not in out.stdout + out.stderr
    assert '"FADEN_NODE_AGENT_ENROLLMENT_TOKEN": "<redacted>"' in out.stdout
    bad = run_cli("run", ADVERTISE_SCHEME="ftp", ENROLLMENT_TOKEN=TOKEN)
    assert bad.returncode == 2
    assert bad.stderr.strip().count("\n") == 0
    assert "FADEN_NODE_AGENT_ADVERTISE_SCHEME='ftp'" in bad.stderr
    assert TOKEN not in bad.stderr


def test_a_path_with_an_unknown_user_is_a_one_line_error():
    """Found by the config fuzz: `~0` made Path.expanduser raise RuntimeError."""
    with pytest.raises(ConfigError) as err:
        load_config({"FADEN_NODE_AGENT_PEER_CERT_FILE": "~no-such-user-0/cert.pem"})
    assert "PEER_CERT_FILE" in str(err.value) and "\n" not in str(err.value)


def test_each_declared_variable_is_exactly_one_config_field():
    from faden_agent.config import VARIABLES, config_fields

    declared = [v.field for v in VARIABLES]
    assert len(declared) == len(set(declared))
    assert set(declared) == set(config_fields()) - {"route_address"}  # route_address: computed, no variable
