"""Inventory figures (issue 5): time to build one full inventory record on this machine
(all probes: host, disks, network, Docker, GPU; median of N), its size in bytes as it
travels (orjson), and the size of the "unchanged" record that replaces it when nothing
but gauges moved.

    python3 bench/inventory_bench.py [--runs 20] [--json bench/results/inventory.json]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import orjson

from faden_agent import protocol
from faden_agent.backend.outbox import make_record
from faden_agent.config import load_config
from faden_agent.workers.inventory.collector import Collector
from faden_agent.workers.inventory.record import RecordEmitter


def wire_size(data: dict) -> int:
    return len(orjson.dumps(make_record(protocol.INVENTORY, data)))


def measure(runs: int) -> dict:
    """Build time (median/min/max of `runs` full records), per-probe medians and wire sizes."""
    with tempfile.TemporaryDirectory() as tmp:
        config = load_config(state_path=Path(tmp) / "state.json")
        collector = Collector(config)
        collector.collect()  # warm-up: first Docker client, NVML init, psutil caches
        build_s, probe_ms = [], {}
        full = unchanged = None
        for _ in range(runs):
            emitter = RecordEmitter()  # a fresh one: every build is a full record
            started = time.perf_counter()
            sections = collector.collect()
            full = emitter.build(sections)
            build_s.append(time.perf_counter() - started)
            for name, entry in sections["probes"].items():
                probe_ms.setdefault(name, []).append(entry["usage"]["duration_ms"])
            emitter.sent(full)
            unchanged = emitter.build(collector.collect())
    assert full["type"] == "full" and unchanged["type"] == "unchanged", "the machine changed during the run"
    docker = full.get("docker") or {}
    figures = {
        "runs": runs,
        "full_build_median_ms": round(statistics.median(build_s) * 1000, 2),
        "full_build_min_ms": round(min(build_s) * 1000, 2),
        "full_build_max_ms": round(max(build_s) * 1000, 2),
        "probe_median_ms": {n: round(statistics.median(v), 2) for n, v in probe_ms.items()},
        "full_record_bytes": wire_size(full),
        "unchanged_record_bytes": wire_size(unchanged),
        "machine": {
            "images": len(docker.get("images") or ()),
            "managed_containers": len(docker.get("containers") or ()),
            "interfaces": len(full["network"] or ()),
            "filesystems": len(full["disks"] or ()),
            "gpus": len((full.get("gpu") or {}).get("devices") or ()),
        },
    }
    return figures


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    figures = measure(args.runs)
    text = json.dumps(figures, indent=2)
    print(text)
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
