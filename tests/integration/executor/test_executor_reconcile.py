"""Reconciliation after an outage longer than dockerd's event memory: the agent is
SIGKILLed while its managed containers die, get OOM-killed and restart; then more events
than dockerd keeps (256) push theirs out. The restarted agent reports the die, oom and
restart as events marked `reconciled`, and ships the lines printed while it was down."""

from __future__ import annotations

import time
import uuid

import pytest

from faden_agent import protocol
from tests.conftest import TEST_IMAGE
from tests.support.agentproc import wait_for
from tests.support.executorproc import executor_factory, prefix, remove_containers  # noqa: F401
from tests.support.journalfiles import JournalWriter
from tests.support.logsagent import assert_only_exact_duplicates, text
from tests.support.lokireceiver import LokiReceiver

pytestmark = pytest.mark.docker
DOCKER_EVENTS_KEPT = 256  # dockerd's in-memory event log (daemon/events: eventsLimit)


def flood_docker_events(docker_client, count: int) -> None:
    """`count` container events of unmanaged throwaway containers (create + destroy each)."""
    for _ in range(count // 2 + 1):
        c = docker_client.api.create_container(TEST_IMAGE, ["true"], name=f"faden-flood-{uuid.uuid4().hex[:10]}")
        docker_client.api.remove_container(c["Id"], force=True)


def test_deaths_ooms_and_restarts_during_an_outage_beyond_dockers_event_buffer_are_reconciled(
    executor_factory, prefix, docker_client, tmp_path
):
    journal = JournalWriter(tmp_path / "journal")
    journal.append(journal.lines(["boot"]))
    counter = tmp_path / "counter"
    counter.mkdir()
    labels = {protocol.LABEL_MANAGED: "true", protocol.LABEL_AGENT_ID: "fx-agent"}
    wait_s = 20  # every container acts this long after its start: after the agent is killed
    with LokiReceiver() as loki:
        settings = {"loki_url": loki.url, "journal_directory": journal.directory, "log_flush_interval_sec": 0.2}
        agent, ex = executor_factory(full_agent=True, **settings)
        run = docker_client.containers.run
        dies = run(
            TEST_IMAGE,
            ["sh", "-c", f"echo a-up; sleep {wait_s}; echo a-last-words; exit 3"],
            name=f"{prefix}-dies",
            labels=labels,
            detach=True,
        )
        # Docker flags OOMKilled reliably only for an OOM kill right at a start: the second run
        # (started by the test once the agent is dead) eats more than its limit at once.
        ooms = run(
            TEST_IMAGE,
            [
                "sh",
                "-c",
                "n=$(cat /c/b 2>/dev/null || echo 0); echo $((n+1)) > /c/b; "
                f"[ $n -eq 0 ] && echo b-up && sleep {wait_s} && exit 0; "
                "echo b-eating; exec busybox dd if=/dev/zero of=/dev/null bs=64M count=1",
            ],
            name=f"{prefix}-ooms",
            labels=labels,
            detach=True,
            mem_limit="16m",
            memswap_limit="16m",
            volumes={str(counter): {"bind": "/c", "mode": "rw"}},
        )
        loops = run(
            TEST_IMAGE,
            [
                "sh",
                "-c",
                f"n=$(cat /c/n 2>/dev/null || echo 0); n=$((n+1)); echo $n > /c/n; "
                f"[ $n -eq 1 ] && sleep {wait_s}; echo c-run-$n; exit 1",
            ],
            name=f"{prefix}-loops",
            labels=labels,
            detach=True,
            restart_policy={"Name": "on-failure", "MaximumRetryCount": 3},
            volumes={str(counter): {"bind": "/c", "mode": "rw"}},
        )
        ids = {dies.id, ooms.id, loops.id}
        try:
            wait_for(
                lambda: ids <= {e["container_id"] for e in ex.events("container.start")},
                20,
                what="start events of the three containers",
            )
            loki.wait_for(lambda e: {"a-up", "b-up"} <= {text(x) for x in e}, 20)
            time.sleep(0.5)  # the executor stores each container's state after reporting its start
            agent.kill()  # SIGKILL, the whole process group
            killed_at = time.time()
            assert all(docker_client.api.inspect_container(i)["State"]["Running"] for i in ids), (
                "a container acted before the agent was killed; the test proves nothing"
            )

            def settled():
                a, b, c = (docker_client.api.inspect_container(i) for i in (dies.id, ooms.id, loops.id))
                return (
                    not a["State"]["Running"]
                    and not b["State"]["Running"]
                    and not c["State"]["Running"]
                    and c["RestartCount"] == 3
                ) and (a, b, c)

            wait_for(
                lambda: not docker_client.api.inspect_container(ooms.id)["State"]["Running"],
                120,
                interval_s=0.5,
                what="the first run of the OOM container to end",
            )
            ooms.start()
            a, b, c = wait_for(settled, 120, interval_s=0.5, what="the die, the OOM kill and 3 restarts")
            assert a["State"]["ExitCode"] == 3 and b["State"]["ExitCode"] == 137, b["State"]
            # What the agent can reconcile is what Docker recorded; this engine sometimes loses its
            # OOM notifications altogether (the kernel kills, no "oom" event, OOMKilled false).
            docker_saw_oom = b["State"]["OOMKilled"]
            flood_docker_events(docker_client, DOCKER_EVENTS_KEPT + 50)
            left = list(
                docker_client.api.events(
                    since=killed_at,
                    until=time.time(),
                    decode=True,
                    filters={"type": "container", "label": f"{protocol.LABEL_MANAGED}=true"},
                )
            )
            assert not [e for e in left if e.get("id") in ids or (e.get("Actor") or {}).get("ID") in ids], (
                "dockerd still holds the outage's events: the replay alone would do"
            )

            agent, ex = executor_factory(full_agent=True, **settings)  # the same state directory
            reconciled = wait_for(
                lambda: (
                    (r := [e for e in ex.events() if e.get("reconciled")])
                    and {(e["container_id"], e["type"]) for e in r}
                    >= {(dies.id, "container.die"), (ooms.id, "container.die"), (loops.id, "container.restart")}
                    | ({(ooms.id, "container.oom")} if docker_saw_oom else set())
                    and r
                ),
                30,
                what="reconciled die, oom and restart events",
            )
            expected_lines = {"a-last-words", "b-eating", "c-run-2", "c-run-3", "c-run-4"}
            loki.wait_for(lambda e: expected_lines <= {text(x) for x in e}, 30)
            mine = [x for x in loki.entries() if x.labels.get("container", "").startswith(prefix)]
            lines = [text(x) for x in mine]
        finally:
            remove_containers(docker_client, prefix)
    by = {(e["container_id"], e["type"]): e for e in reconciled}
    die = by[(dies.id, "container.die")]
    assert die["exit_code"] == 3 and die["finished_at"] == a["State"]["FinishedAt"] and die["name"] == f"{prefix}-dies"
    assert by[(ooms.id, "container.die")]["oom_killed"] is docker_saw_oom
    assert by[(ooms.id, "container.die")]["exit_code"] == 137
    if not docker_saw_oom:
        print("Docker did not record the OOM kill this time (OOMKilled false): the oom event was not checked")
    assert by[(loops.id, "container.restart")]["restart_count"] == 3
    assert by[(loops.id, "container.restart")]["restarts"] == 3
    assert not [e for e in ex.events("container.die") if e["container_id"] == dies.id and not e.get("reconciled")]
    printed = ["a-up", "a-last-words", "b-up", "b-eating", "c-run-1", "c-run-2", "c-run-3", "c-run-4"]
    print(
        f"outage: reconciled events {sorted(t for _, t in by)}; lines {sum(x in lines for x in printed)}/"
        f"{len(printed)} delivered, {len(lines) - len(set(lines))} duplicates"
    )
    assert sorted(set(lines)) == sorted(printed)
    assert_only_exact_duplicates(mine)  # lines accepted just before the kill come again, identical: Loki drops them
