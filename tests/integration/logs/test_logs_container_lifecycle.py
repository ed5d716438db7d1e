"""Every line a managed container printed reaches Loki, with the real engine and
the real agent: a container that lives 50 ms, a crash loop under a restart policy, a
container removed by container.remove right after it exits, and a log driver that cannot
be read back. Figures (lines delivered/printed, duplicates, exit-to-Loki time) are printed."""

from __future__ import annotations

import time
from collections import Counter
from datetime import datetime

import pytest

from tests.conftest import TEST_IMAGE
from tests.support.agentproc import wait_for
from tests.support.executorproc import executor_factory, prefix, remove_containers  # noqa: F401
from tests.support.logsagent import text
from tests.support.managedlogs import agent, lines_of, loki, managed  # noqa: F401 - fixtures

pytestmark = pytest.mark.docker


def docker_time_s(value: str) -> float:
    """Docker's RFC 3339 time with nanoseconds -> epoch seconds."""
    head, _, frac = value.rstrip("Z").partition(".")
    return datetime.fromisoformat(head + "+00:00").timestamp() + float(f"0.{frac or 0}")


def test_a_container_that_prints_3_lines_and_exits_within_50_ms(agent, loki, docker_client, prefix):
    # A loaded engine may take longer than the premise allows to start and reap one: up to
    # three such containers, every one's lines checked, at least one of them short-lived.
    lived: list[float] = []
    try:
        for attempt in range(3):
            name = f"{prefix}-blink{attempt}"
            container = docker_client.containers.run(
                TEST_IMAGE, ["sh", "-c", "echo one; echo two; echo three"], name=name, labels=managed(), detach=True
            )
            container.wait(timeout=30)
            state = docker_client.api.inspect_container(name)["State"]
            lived.append(docker_time_s(state["FinishedAt"]) - docker_time_s(state["StartedAt"]))
            loki.wait_for(lambda e, name=name: len([x for x in e if x.labels.get("container") == name]) >= 3, 30)
            arrived = time.time()
            time.sleep(1)  # nothing more may come
            got = lines_of(loki, name)
            print(
                f"50 ms container: lived {lived[-1] * 1000:.0f} ms; {len(got)}/3 lines delivered; "
                f"last line at the receiver {arrived - docker_time_s(state['FinishedAt']):.2f} s after exit"
            )
            assert got == ["one", "two", "three"], name
            if lived[-1] < 0.5:
                break
    finally:
        remove_containers(docker_client, prefix)
    assert min(lived) < 0.5, lived


def test_a_crash_looping_container_is_followed_across_20_restarts(agent, loki, docker_client, prefix, tmp_path):
    name = f"{prefix}-loop"
    counter = tmp_path / "counter"
    counter.mkdir()
    # Docker doubles its restart delay (100 ms, 200 ms, ...) unless a run lasted 10 s: every
    # 4th run does, so 20 restarts take about a minute instead of ten.
    script = (
        'n=$(cat /c/n 2>/dev/null || echo 0); n=$((n+1)); echo $n > /c/n; echo "run $n"; '
        "[ $((n % 4)) -eq 0 ] && sleep 10; exit 1"
    )
    try:
        docker_client.containers.run(
            TEST_IMAGE,
            ["sh", "-c", script],
            name=name,
            labels=managed(),
            detach=True,
            restart_policy={"Name": "always"},
            volumes={str(counter): {"bind": "/c", "mode": "rw"}},
        )
        loki.wait_for(lambda e: [x for x in e if x.labels.get("container") == name and text(x) == "run 20"], 240)
        docker_client.api.update_container(name, restart_policy={"Name": "no"})
        time.sleep(1)
        got = lines_of(loki, name)
        restarts = docker_client.api.inspect_container(name)["RestartCount"]
    finally:
        remove_containers(docker_client, prefix)
    counts = Counter(got)
    runs = [f"run {i}" for i in range(1, 21)]
    duplicates = sum(n - 1 for n in counts.values() if n > 1)
    print(
        f"crash loop: {sum(counts[r] > 0 for r in runs)}/20 lines delivered, {duplicates} duplicates, "
        f"{restarts} restarts by Docker"
    )
    assert [counts[r] for r in runs] == [1] * 20, counts
    assert restarts >= 19


def test_1000_lines_then_container_remove_right_after_exit(agent, loki, docker_client, prefix):
    _, ex = agent
    name = f"{prefix}-words"
    loki.delay_s = 0.3  # a Loki that takes its time: the remove must wait for it
    script = 'i=1; while [ $i -le 1000 ]; do echo "last words $i"; i=$((i+1)); done'
    container = docker_client.containers.run(TEST_IMAGE, ["sh", "-c", script], name=name, labels=managed(), detach=True)
    try:
        container.wait(timeout=30)
        started = time.monotonic()
        done = ex.run(f"{prefix}-rm", "container.remove", {"name": name}, timeout_s=60)
        took = time.monotonic() - started
        assert done["state"] == "succeeded", done
        got = lines_of(loki, name)  # at once: the remove ended only after Loki accepted them
    finally:
        remove_containers(docker_client, prefix)
    counts = Counter(got)
    print(
        f"1000 lines then remove: {len(set(got))}/1000 delivered when the remove ended ({took:.2f} s), "
        f"{sum(n - 1 for n in counts.values())} duplicates"
    )
    assert set(got) == {f"last words {i}" for i in range(1, 1001)}


def test_a_log_driver_that_cannot_be_read_is_reported_once(agent, loki, docker_client, prefix):
    agent_process, ex = agent
    name = f"{prefix}-mute"
    try:
        docker_client.containers.run(
            TEST_IMAGE,
            ["sh", "-c", "echo unseen; sleep 1"],
            name=name,
            labels=managed(),
            detach=True,
            log_config={"type": "none"},
        )
        event = wait_for(
            lambda: [e for e in ex.events("logs.container_unreadable") if e["name"] == name],
            20,
            what="a logs.container_unreadable event",
        )
        docker_client.containers.get(name).restart(timeout=1)
        time.sleep(2)
        status = agent_process.workers()["logs"]["status"]["sources"]["containers"]
        events = [e for e in ex.events("logs.container_unreadable") if e["name"] == name]
    finally:
        remove_containers(docker_client, prefix)
    assert len(events) == 1 and "none" in event[0]["message"]
    assert status["unreadable"] >= 1


def test_1000_lines_then_a_replacing_container_run(agent, loki, docker_client, prefix):
    _, ex = agent
    name = f"{prefix}-replaced"
    loki.delay_s = 0.3
    script = 'i=1; while [ $i -le 1000 ]; do echo "old words $i"; i=$((i+1)); done'
    old = docker_client.containers.run(TEST_IMAGE, ["sh", "-c", script], name=name, labels=managed(), detach=True)
    try:
        old.wait(timeout=30)
        done = ex.run(
            f"{prefix}-new",
            "container.run",
            {"name": name, "image": TEST_IMAGE, "replace": True, "command": ["sleep", "300"]},
            timeout_s=60,
        )
        assert done["state"] == "succeeded", done
        got = [text(e) for e in loki.entries() if e.labels.get("container") == name and text(e).startswith("old ")]
    finally:
        remove_containers(docker_client, prefix)
    print(f"1000 lines then replace: {len(set(got))}/1000 delivered when the run ended")
    assert set(got) == {f"old words {i}" for i in range(1, 1001)}
