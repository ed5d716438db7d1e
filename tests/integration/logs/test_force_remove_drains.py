"""container.remove with force on a running, crash-looping container: it is stopped, its
lines drained to Loki, then removed; every line of every run arrives (the real engine and
the real agent; Loki: the receiver of the container log lifecycle tests)."""

from __future__ import annotations

import time

import pytest

from tests.conftest import TEST_IMAGE
from tests.support.agentproc import wait_for
from tests.support.executorproc import executor_factory, prefix, remove_containers  # noqa: F401
from tests.support.managedlogs import agent, lines_of, loki, managed  # noqa: F401 - fixtures

pytestmark = pytest.mark.docker

# Runs 1-3 print a line and crash at once (Docker restarts them); run 4 prints without a
# pause until it is stopped. Every line printed is also appended to /c/printed.
SCRIPT = (
    'n=$(cat /c/n 2>/dev/null || echo 0); n=$((n+1)); echo $n > /c/n; echo "run $n" | tee -a /c/printed; '
    '[ $n -lt 4 ] && exit 1; i=0; while true; do i=$((i+1)); echo "run $n line $i" | tee -a /c/printed; done'
)


def test_a_crash_looping_container_removed_with_force_ships_every_run(agent, loki, docker_client, prefix, tmp_path):
    _, ex = agent
    loki.delay_s = 0.5  # a Loki that takes its time: the remove must wait for it
    name = f"{prefix}-loop"
    shared = tmp_path / "c"
    shared.mkdir()
    printed = shared / "printed"
    try:
        docker_client.containers.run(
            TEST_IMAGE,
            ["sh", "-c", SCRIPT],
            name=name,
            labels=managed(),
            detach=True,
            restart_policy={"Name": "always"},
            volumes={str(shared): {"bind": "/c", "mode": "rw"}},
        )
        wait_for(lambda: printed.exists() and printed.read_text().count("\n") >= 2000, 120, what="run 4 printing")
        started = time.monotonic()
        done = ex.run(f"{prefix}-rm", "container.remove", {"name": name, "force": True, "timeout_s": 1}, timeout_s=60)
        took = time.monotonic() - started
        assert done["state"] == "succeeded", done
        got = set(lines_of(loki, name))  # at once: the remove ended only after Loki accepted them
    finally:
        remove_containers(docker_client, prefix)
    want = printed.read_text().splitlines()
    missing = [line for line in want if line not in got]
    print(
        f"force remove of a crash loop: {len(want) - len(missing)}/{len(want)} lines in Loki at its end ({took:.2f} s)"
    )
    assert {f"run {n}" for n in range(1, 5)} <= got
    assert missing == [], missing[-5:]
