"""Hypothesis strategies for command specs, key by key: a valid spec of each kind, nested places
where one field can go wrong, and specs with one to three keys replaced by any JSON value as
the stream delivers it (orjson round trip: no NaN/inf, ints up to 64 bits)."""

from __future__ import annotations

import orjson
from hypothesis import strategies as st

from faden_agent.workers.executor.commands import COMMAND_KINDS, KINDS
from tests.support.fuzzvalues import json_values

VALID = {
    "image.pull": {"image": "busybox:1", "auth": {"username": "u", "password": "SECRET-PW"}},
    "image.remove": {"image": "busybox:1"},
    "image.prune": {"keep": ["busybox:1", "sha256:" + "a" * 64]},
    "container.run": {
        "name": "c1",
        "image": "busybox:1",
        "command": ["sleep", "1"],
        "env": {"A": "1"},
        "ports": {"8000/tcp": 8000},
        "mounts": [{"type": "bind", "source": "/tmp", "target": "/x"}],
        "ulimits": {"nofile": {"soft": 1, "hard": 2}},
        "restart_policy": "always",
        "healthcheck": {"test": ["CMD", "true"], "interval_s": 1},
        "shm_size": "1g",
        "gpus": "all",
    },
    "container.stop": {"name": "c1", "timeout_s": 3},
    "container.start": {"name": "c1"},
    "container.restart": {"name": "c1"},
    "container.remove": {"name": "c1"},
    "command.cancel": {"command_id": "c-1"},
    "image.serve": {
        "image_id": "sha256:" + "a" * 64,
        "ticket_sha256": "b" * 64,
        "receiver": "198.18.0.12",
        "ttl_s": 60,
    },
    "image.relay": {
        "image_id": "sha256:" + "a" * 64,
        "url": "http://198.18.0.1:8000/api/agent/v1/relays/x",
        "token": "SECRET-TICKET-relay-token",
    },
    "image.fetch": {
        "image_id": "sha256:" + "a" * 64,
        "image": "app:1",
        "peers": [{"address": "http://198.18.0.11:7480", "ticket": "SECRET-TICKET-0123456789"}],
    },
    "traffic.serve": {"tickets": [{"ticket_sha256": "b" * 64, "receiver": "198.18.0.12"}], "ttl_s": 60},
    "traffic.probe": {
        "peers": [{"machine": "node-2", "address": "http://198.18.0.12:7480", "ticket": "SECRET-TICKET-0123456789"}],
        "duration_s": 2,
        "max_bytes": 1 << 20,
        "round_trips": 10,
    },
    "node.drain": {"containers": ["c1", "c2"], "stop": True, "remove": True, "request_id": "r-1", "deadline_s": 30},
    "node.undrain": {"request_id": "r-1"},
    "gpu.forget": {"uuid": "GPU-00000001-fake", "request_id": "r-2"},
    "gpu.check": {"gpus": ["GPU-00000001-fake"], "level": 2, "time_limit_s": 60, "allow_busy": True},
    "gpu.reset": {"gpu": "GPU-00000001-fake", "stop_containers": True, "deadline_s": 120},
}
assert set(VALID) == set(COMMAND_KINDS)
# Nested places where one field can go wrong while the rest stays valid.
NESTED = {
    "mounts": lambda v: [{"type": "bind", "source": "/tmp", "target": "/x", "read_only": v}],
    "healthcheck": lambda v: {"test": ["CMD", "true"], "interval_s": v, "timeout_s": 1, "retries": 1},
    "ports": lambda v: {"8000/tcp": v},
    "ulimits": lambda v: {"nofile": v},
    "restart_policy": lambda v: {"name": "on-failure", "maximum_retry_count": v},
    "env": lambda v: {"A": v},
    "labels": lambda v: {"a": v},
    "auth": lambda v: {"username": "u", "password": v},
    "peers": lambda v: [{"address": v, "ticket": "SECRET-TICKET-0123456789"}],
}
nasty = st.sampled_from(
    [
        0,
        -1,
        1e308,
        -1e308,
        5e-324,
        2**63,
        2**64 - 1,
        -(2**63),
        "",
        " ",
        "8g",
        "0g",
        "all",
        "/",
        "/dev/x",
        "9" * 5000,
        "9" * 5000 + "g",
        "99999999999999999999g",
        "8g\n",
        "CMD",
        ["CMD"],
        ["NONE"],
        [],
        {},
        {"soft": 1},
        {"soft": 1, "hard": "2"},
        None,
        True,
        "a" * 10_000,
        "\u0000",
        "\ud7ff",
        "io.fadenstack.managed",
    ]
)
values = (json_values | nasty).map(lambda v: orjson.loads(orjson.dumps(v)))


def all_keys(kind: str) -> list[str]:
    return [*KINDS[kind].required, *KINDS[kind].optional, "not_a_key"]


@st.composite
def mutated(draw):
    kind = draw(st.sampled_from(sorted(KINDS)))
    spec = dict(VALID[kind])
    for _ in range(draw(st.integers(1, 3))):
        key = draw(st.sampled_from(all_keys(kind)))
        value = draw(values)
        spec[key] = NESTED[key](value) if key in NESTED and draw(st.booleans()) else value
    if draw(st.booleans()):
        spec.pop(draw(st.sampled_from(sorted(spec))))
    return kind, spec
