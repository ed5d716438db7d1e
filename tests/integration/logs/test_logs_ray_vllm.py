"""Ray and vLLM output as they print it, through the real agent into a real Loki (2.8 and
3.x): a managed container's tracebacks arrive as one entry each with the right level, and
Ray's own log files (raylet, GCS, core workers, workers' .out/.err, monitor, dashboard,
rotated ones too) arrive under their fixed `file` kinds."""

from __future__ import annotations

import os
import time
import uuid

import pytest

from faden_agent import protocol
from tests.conftest import TEST_IMAGE
from tests.support.agentproc import wait_for
from tests.support.journalfiles import JournalWriter
from tests.support.logsagent import start_agent
from tests.support.lokiproc import LOKI_OWN_LABELS, real_loki  # noqa: F401 - fixture

ENGINE = "(EngineCore_0 pid=412) ERROR 12-02 10:00:05 [core.py:586] "
STDOUT = [
    "INFO 12-02 10:00:00 [api_server.py:1024] vLLM API server version 0.9.1",
    ENGINE + "EngineCore failed to start.",
    ENGINE + "Traceback (most recent call last):",
    ENGINE + '  File "/usr/local/lib/python3.12/dist-packages/vllm/v1/engine/core.py", line 577, in run_engine_core',
    ENGINE + "    engine_core = EngineCoreProc(*args, **kwargs)",
    ENGINE + "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB.",
    "(ServeReplica:default:Model pid=977) INFO 2024-12-02 10:00:06,001 default_Model abc123 -- replica ready",
    "WARNING 12-02 10:00:07 [scheduler.py:1754] Sequence group 0 is preempted by PreemptionMode.RECOMPUTE",
]
STDERR = [
    "2024-12-02 10:00:08,123\tERROR worker.py:422 -- Unhandled error: ray::Model.__call__() (pid=977)",
    "Traceback (most recent call last):",
    '  File "/app/model.py", line 12, in __call__',
    '    raise ValueError("bad input")',
    "ValueError: bad input",
    "I1202 10:00:09.000000   412 raylet.cc:12] glog line",
    "Traceback (most recent call last):",
    '  File "/app/main.py", line 3, in <module>',
    "    main()",
    "RuntimeError: engine died",
]


def script(lines: list[str], to_stderr: bool) -> str:
    """sh that prints the lines in bursts with pauses under the wait bound between them."""
    out = []
    for i, line in enumerate(lines):
        quoted = "'" + line.replace("'", "'\\''") + "'"
        out.append(f"echo {quoted}{' >&2' if to_stderr else ''}")
        if i % 3 == 2:
            out.append("sleep 0.2")
    return "; ".join(out)


def mine(loki, agent_id: str, container: str) -> list[tuple[dict[str, str], int, str]]:
    got = loki.entries(f'{{agent_id="{agent_id}", container="{container}"}}')
    own = LOKI_OWN_LABELS[loki.version]
    return sorted(
        ((({k: v for k, v in labels.items() if k not in own}), ts, line) for labels, ts, line in got),
        key=lambda e: e[1],
    )


@pytest.mark.docker
def test_a_vllm_and_ray_container_ships_one_entry_per_traceback_with_its_level(tmp_path, real_loki, docker_client):
    agent_id = f"rv-{uuid.uuid4().hex[:8]}"
    name = f"faden-logs-rayvllm-{uuid.uuid4().hex[:8]}"
    journal = JournalWriter(tmp_path / "journal")
    journal.append(journal.lines(["boot"]))
    container = docker_client.containers.create(
        TEST_IMAGE,
        ["sh", "-c", script(STDOUT, False) + "; " + script(STDERR, True)],
        name=name,
        labels={protocol.LABEL_MANAGED: "true", protocol.LABEL_AGENT_ID: agent_id},
    )
    try:
        with start_agent(tmp_path, real_loki, journal.directory, agent_id=agent_id):
            container.start()
            assert container.wait(timeout=30)["StatusCode"] == 0
            got = wait_for(
                lambda: (entries := mine(real_loki, agent_id, name)) and len(entries) >= 7 and entries,
                60,
                interval_s=0.5,
                what="the container's entries in Loki",
            )
            time.sleep(2)  # nothing more may come (no line shipped alone as well)
            got = mine(real_loki, agent_id, name)
    finally:
        container.remove(force=True)
    by_stream = {
        stream: [(labels["level"], line) for labels, _, line in got if labels["stream"] == stream]
        for stream in ("stdout", "stderr")
    }
    assert by_stream["stdout"] == [
        ("info", STDOUT[0]),
        ("error", "\n".join(STDOUT[1:6])),
        ("info", STDOUT[6]),
        ("warning", STDOUT[7]),
    ]
    assert by_stream["stderr"] == [
        ("error", "\n".join(STDERR[0:5])),
        ("info", STDERR[5]),
        ("error", "\n".join(STDERR[6:])),
    ]
    docker_stamps = sorted(ts for _, ts, _ in got)
    assert len(set(docker_stamps)) == len(docker_stamps)  # each entry its head's own stamp


def write(path, lines: list[str]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a") as fh:
        fh.write("".join(line + "\n" for line in lines))


RAY_FILES = {
    "raylet.1.out": ["[2024-12-02 09:59:59,000 I 412 433] (raylet) main.cc:100: rotated away earlier"],
    "raylet.out": [
        "[2024-12-02 10:00:00,000 I 412 433] (raylet) main.cc:120: Raylet started",
        "[2024-12-02 10:00:01,000 E 412 433] (raylet) node_manager.cc:3034: 1 Workers killed due to memory pressure",
    ],
    "gcs_server.out": ["[2024-12-02 10:00:00,500 W 300 301] (gcs_server) gcs_placement_group.cc:80: infeasible bundle"],
    "python-core-worker-01ab_977.log": ["[2024-12-02 10:00:02,000 I 977 980] core_worker.cc:500: task started"],
    "worker-01ab-01000000-977.err": [
        "Traceback (most recent call last):",
        '  File "/app/model.py", line 12, in __call__',
        "ValueError: bad input",
    ],
    "monitor.log": ["2024-12-02 10:00:03,000\tWARNING monitor.py:512 -- Resource demands unfulfilled"],
    "dashboard.log": ["2024-12-02 10:00:04,000\tINFO head.py:300 -- Dashboard head started"],
    "debug_state.txt": ["not a log: never shipped"],
}


def recent(lines: list[str], now: float) -> list[str]:
    """The lines with their 2024 stamps moved to a few minutes before `now` (Loki refuses old lines)."""
    return [
        line.replace("2024-12-02 10:00", time.strftime("%Y-%m-%d %H:%M", time.gmtime(now - 300))).replace(
            "2024-12-02 09:59", time.strftime("%Y-%m-%d %H:%M", time.gmtime(now - 360))
        )
        for line in lines
    ]


def test_rays_own_log_files_arrive_under_fixed_kinds(tmp_path, real_loki):
    agent_id = f"rc-{uuid.uuid4().hex[:8]}"
    journal = JournalWriter(tmp_path / "journal")
    journal.append(journal.lines(["boot"]))
    logs = tmp_path / "ray" / "ray-head-3" / "session_2024-12-02_10-00-00_1" / "logs"
    (logs / "serve").mkdir(parents=True)
    now = time.time()
    written = {name: recent(lines, now) for name, lines in RAY_FILES.items()}
    with start_agent(tmp_path, real_loki, journal.directory, agent_id=agent_id) as agent:
        agent.wait_ray_listed()  # raylet.1.out is a rotated file: it must appear after the start
        for name, lines in written.items():
            write(logs / name, lines)
        os.utime(logs / "raylet.1.out", (time.time() - 5, time.time() - 5))
        got = wait_for(
            lambda: (entries := mine(real_loki, agent_id, "ray-head-3")) and len(entries) >= 8 and entries,
            60,
            interval_s=0.5,
            what="Ray's files in Loki",
        )
        time.sleep(2)
        got = mine(real_loki, agent_id, "ray-head-3")
    # Loki 2.8 takes no structured metadata: it follows the line after a tab (docs/logs.md).
    shipped = sorted(
        (labels["source"], labels["file"], labels["level"], line.split("\tfilename=")[0]) for labels, _, line in got
    )
    assert shipped == sorted(
        [
            ("ray", "raylet", "info", written["raylet.1.out"][0]),
            ("ray", "raylet", "info", written["raylet.out"][0]),
            ("ray", "raylet", "error", written["raylet.out"][1]),
            ("ray", "gcs_server", "warning", written["gcs_server.out"][0]),
            ("ray", "core_worker", "info", written["python-core-worker-01ab_977.log"][0]),
            ("ray", "worker", "error", "\n".join(RAY_FILES["worker-01ab-01000000-977.err"])),
            ("ray", "monitor", "warning", written["monitor.log"][0]),
            ("ray", "dashboard", "info", written["dashboard.log"][0]),
        ]
    )
    assert {labels.get("filename") for labels, _, _ in got if labels["file"] == "raylet"} <= {"raylet.out", None}


@pytest.mark.docker
def test_a_removed_containers_ray_logs_go_once_shipped_and_a_live_ones_stay(tmp_path, docker_client):
    """The real agent: the container source tells the Ray reader of Docker's destroy; the
    directory goes once its lines are in Loki, a live container's stays."""
    from tests.support.lokireceiver import LokiReceiver

    agent_id = f"rr-{uuid.uuid4().hex[:8]}"
    gone, live = (f"faden-logs-ret-{uuid.uuid4().hex[:8]}" for _ in range(2))
    labels = {protocol.LABEL_MANAGED: "true", protocol.LABEL_AGENT_ID: agent_id}
    containers = [docker_client.containers.create(TEST_IMAGE, ["true"], name=n, labels=labels) for n in (gone, live)]
    for name in (gone, live):
        write(tmp_path / "ray" / name / "session_2024-12-02_10-00-00_1" / "logs" / "raylet.out", [f"{name} up"])
    journal = JournalWriter(tmp_path / "journal")
    journal.append(journal.lines(["boot"]))
    try:
        with LokiReceiver() as loki, start_agent(tmp_path, loki, journal.directory, agent_id=agent_id):
            loki.wait_for(lambda e: len([x for x in e if x.labels.get("source") == "ray"]) >= 2, 30)
            containers[0].remove(force=True)
            wait_for(lambda: not (tmp_path / "ray" / gone).exists(), 20, what="the removed container's Ray logs gone")
            assert (tmp_path / "ray" / live).exists()
            ray = [e.line for e in loki.entries() if e.labels.get("source") == "ray"]
            assert sorted(line.split("\t")[0] for line in ray) == sorted([f"{gone} up", f"{live} up"])
    finally:
        for container in containers:
            try:
                container.remove(force=True)
            except Exception:  # noqa: BLE001 - removed by the test already
                pass
