"""The engine's error texts told apart (workers/executor/docker_errors.py), on the texts the
real engines (20.10 and 29) print."""

from __future__ import annotations

import pytest

from faden_agent.workers.executor import docker_errors

IMAGE = "127.0.0.1:5000/faden/busybox:1"


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        ('invalid mount config for type "bind": bind source path does not exist: /srv/ray/x', "invalid_spec"),
        ("No such image: 127.0.0.1:5000/faden/busybox:1", "image_not_found"),
        (
            "manifest for 127.0.0.1:5000/faden/busybox:9 not found: manifest unknown: manifest unknown",
            "image_not_found",
        ),
        ('Get "https://nowhere.invalid/v2/": dial tcp: lookup nowhere.invalid: no such host', "registry_unreachable"),
        ("write /var/lib/docker/tmp/x: no space left on device", "no_space"),
        ("something else entirely", "docker_error"),
    ],
)
def test_a_create_error_gets_the_reason_its_text_names(text, reason):
    got, message = docker_errors.failure("creating container c1", text, "docker_error", IMAGE)
    assert got == reason
    assert message.startswith("creating container c1: ") and text in message
