"""A managed container that prints as fast as it can leaves at most its log cap on disk
(a private dockerd on a tmpfs: a flood without the cap fills that one, not the shared disk)."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from tests.conftest import TEST_IMAGE
from tests.support.executorproc import executor_factory, prefix  # noqa: F401
from tests.support.smallengine import small_engine

pytestmark = pytest.mark.docker

FLOOD_S = 5
SLACK = 64 << 10  # Docker rotates after the write that crosses max-size: one message more


def log_files_bytes(log_path: Path) -> int:
    total = 0
    for path in log_path.parent.glob(log_path.name + "*"):
        try:
            total += path.stat().st_size
        except FileNotFoundError:  # rotated away between the listing and the stat
            pass
    return total


def test_a_flooding_container_keeps_at_most_its_log_cap(executor_factory, prefix):
    with small_engine("300m", image=TEST_IMAGE) as engine:
        agent, ex = executor_factory(docker_host=engine.host, container_log_max_size="1m", container_log_max_files="2")
        name = f"{prefix}-flood"
        run = ex.run(
            f"{prefix}-run",
            "container.run",
            {"name": name, "image": TEST_IMAGE, "command": ["yes", "x" * 100], "network_mode": "none"},
        )
        assert run["state"] == "succeeded", run
        inspect = json.loads(engine.docker("inspect", name).stdout)[0]
        assert inspect["HostConfig"]["LogConfig"] == {
            "Type": "json-file",
            "Config": {"max-size": "1m", "max-file": "2"},
        }
        log_path = Path(inspect["LogPath"])
        largest = 0
        until = time.monotonic() + FLOOD_S
        while time.monotonic() < until:
            largest = max(largest, log_files_bytes(log_path))
            time.sleep(0.1)
        engine.docker("stop", "-t", "0", name)
        largest = max(largest, log_files_bytes(log_path))
        rotated = len(list(log_path.parent.glob(log_path.name + ".*")))
        print(f"log cap 2 x 1 MiB: at most {largest / 2**20:.2f} MiB on disk while it printed for {FLOOD_S} s")
        assert rotated >= 1  # it did print past the cap
        assert largest <= (2 << 20) + SLACK


def test_the_default_cap_is_300_mib_per_container(executor_factory, prefix):
    with small_engine("100m", image=TEST_IMAGE) as engine:
        agent, ex = executor_factory(docker_host=engine.host)
        name = f"{prefix}-quiet"
        run = ex.run(
            f"{prefix}-run",
            "container.run",
            {"name": name, "image": TEST_IMAGE, "command": ["sleep", "30"], "network_mode": "none"},
        )
        assert run["state"] == "succeeded", run
        config = json.loads(engine.docker("inspect", name).stdout)[0]["HostConfig"]["LogConfig"]
        assert config == {"Type": "json-file", "Config": {"max-size": "100m", "max-file": "3"}}
