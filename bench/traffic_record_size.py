"""Bytes per traffic record, and per hour for an idle and a busy cluster (issue 15).

    sudo python3 bench/traffic_record_size.py [--interval 2] [--phase 40]

A 3-machine cluster rig (tests/cluster/rig.py; real agents and backend, no engines), one
cluster. Idle phase: nothing but the agents' own backend traffic. Busy phase: a ping-pong
connection between every pair and a bulk transfer whose size changes every few seconds,
so rates keep moving beyond the thresholds. Counts the traffic records the backend
stored in each phase and their JSON size; per hour is scaled to the default interval
(TRAFFIC_INTERVAL_SEC=10): records per sample interval x 360.
"""

from __future__ import annotations

import argparse
import os
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from tests.cluster.rig import Rig  # noqa: E402

DEFAULT_INTERVAL_S = 10


def traffic_rows(rig: Rig, since: float) -> list[tuple[str, int]]:
    db = sqlite3.connect(rig.base_dir / "backend" / "backend.sqlite")
    try:
        return db.execute(
            "SELECT node_id, length(data) FROM records WHERE kind = 'traffic' AND received_at >= ?", (since,)
        ).fetchall()
    finally:
        db.close()


def load(machine, *args: str) -> subprocess.Popen:
    return machine.popen(
        sys.executable,
        "-m",
        "tests.cluster.traffic_load",
        *args,
        stdout=subprocess.DEVNULL,
        cwd=REPO,
        env={**os.environ, "PYTHONPATH": str(REPO)},
    )


def phase(rig: Rig, name: str, seconds: float, interval: float) -> None:
    start = time.time()
    workers: list[subprocess.Popen] = []
    if name == "busy":
        machines = rig.machines
        for m in machines:
            workers.append(load(m, "echo", "7500"))
        time.sleep(1)
        for a in machines:
            for b in machines:
                if a is not b:
                    workers.append(load(a, "pingpong", b.address, "7500", str(seconds)))
        end = time.monotonic() + seconds
        size = 1
        while time.monotonic() < end:  # bulk bursts of changing size between machines 1 and 2
            server = load(rig.machine(2), "serve", "7501", "1", str(size << 20), "0")
            time.sleep(0.3)
            load(rig.machine(1), "send", rig.machine(2).address, "7501", "1", str(size << 20), "0").wait(60)
            server.wait(60)
            size = size * 3 % 61 or 1
            time.sleep(1.5)
    else:
        time.sleep(seconds)
    for worker in workers:
        worker.kill()
        worker.wait(10)
    rows = traffic_rows(rig, start)
    machines = len(rig.machines)
    samples = seconds / interval
    per_record = sum(size for _, size in rows) / len(rows) if rows else 0
    per_interval = len(rows) / machines / samples
    per_hour = per_interval * 3600 / DEFAULT_INTERVAL_S
    print(
        f"{name}: {len(rows)} records from {machines} machines in {seconds:.0f} s "
        f"({per_interval:.2f} per machine per sample), {per_record:.0f} bytes each (JSON data); "
        f"per machine per hour at {DEFAULT_INTERVAL_S} s: {per_hour:.0f} records,"
        f" {per_hour * per_record / 1024:.1f} KiB",
        flush=True,
    )


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--interval", type=float, default=2.0)
    parser.add_argument("--phase", type=float, default=40.0)
    args = parser.parse_args()
    with Rig(3, docker=False, agent_settings={"traffic_interval_sec": args.interval}) as rig:
        rig.backend.admin.set_cluster("bench", [m.node_id for m in rig.machines])
        time.sleep(3 * args.interval)  # first records (rates unknown, then measured) settle
        phase(rig, "idle", args.phase, args.interval)
        phase(rig, "busy", args.phase, args.interval)


if __name__ == "__main__":
    main()
