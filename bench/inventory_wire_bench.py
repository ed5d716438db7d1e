"""Wire bytes from a GPU machine to the backend (issue 41): a real agent on the C-level NVML
(tests/nvml) with 1, 8 and 16 GPUs of 18 NVLinks, production intervals, counted through
bench/counting_proxy.py; idle (GPU gauges moving like a serving GPU's: utilisation and power
change every round) and with a managed container started and removed every minute.

    sudo python3 bench/inventory_wire_bench.py [--gpus 1 8 16] [--rdma 8] [--window 600] [--events-window 300]

It runs in a network namespace of its own with 10 NICs (veth pairs) (--host-network: not).
With --rdma N the machine also has N RDMA NICs (InfiniBand, one beside each GPU under its PCIe
switch) in a sysfs tree of its own (tests/support/fakesysfs.py): topology and node conditions.

Prints up bytes/s by path and record kind, and the bytes each container start or removal
adds over the idle rate. Every figure is a rate over its window: a shorter window gives the
same rate once it holds several inventory rounds (60 s) and gauge ages (300 s).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import sqlite3
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench import executor_bench
from bench.counting_proxy import CountingProxy
from bench.footprint_bench import metered_agent
from faden_agent import protocol
from tests.nvml.state import GiB, GpuState
from tests.support.fakesysfs import FakeSysfs
from tests.support.privateengine import PrivateEngine

LINKS = 18
MOVE_EVERY_S = 20.0  # the gauges move three times per 60 s inventory round
EVENT_EVERY_S = 60.0
IMAGE = executor_bench.IMAGE


def serving_gpus(directory: Path, count: int) -> GpuState:
    state = GpuState(directory, count=count)
    for k, gpu in enumerate(state.gpus):
        gpu["fabric"] = {"state": 3, "status": 0, "clique": 1 + k // 8, "cluster_uuid": f"{k // 8:032x}"}
        gpu["nvlink"] = {
            "links": LINKS,
            **{str(n): {"active": 1, "replay": 0, "recovery": 0, "crc_flit": 0, "crc_data": 0} for n in range(LINKS)},
        }
        gpu["compute"] = {"count": 1, "0": {"pid": 1, "used": 70 * GiB}}
        gpu["memory_used"] = 72 * GiB
    state.write()
    return state


def move_gauges(state: GpuState, stop: threading.Event, rng: random.Random) -> None:
    """A serving GPU: utilisation and power jump every move, temperature and memory drift."""
    while not stop.wait(MOVE_EVERY_S):
        for gpu in state.gpus:
            gpu["util_gpu"] = rng.randint(20, 100)
            gpu["util_memory"] = rng.randint(10, 60)
            gpu["power_mw"] = rng.randint(250_000, 690_000)
            gpu["temperature"] = min(85, max(40, gpu["temperature"] + rng.randint(-2, 2)))
            gpu["memory_used"] = min(79 * GiB, max(60 * GiB, gpu["memory_used"] + rng.randint(-1, 1) * GiB // 4))
        state.write()


def up_bytes(snapshot: dict[str, dict[str, int]]) -> dict[str, int]:
    return {path: row["up"] for path, row in snapshot.items()}


def rates(before: dict[str, int], after: dict[str, int], seconds: float) -> dict[str, float]:
    return {k: round((after.get(k, 0) - before.get(k, 0)) / seconds, 2) for k in sorted(after) if after.get(k, 0)}


def wire_total(snapshot: dict[str, int]) -> int:
    """Bytes on the wire: the paths' heads and bodies (the kind rows are inside the uplink's)."""
    return sum(v for k, v in snapshot.items() if " kind=" not in k)


def window(proxy: CountingProxy, seconds: float, during: Any = None) -> dict[str, Any]:
    before = up_bytes(proxy.snapshot())
    events = during(seconds) if during else 0
    if not during:
        time.sleep(seconds)
    after = up_bytes(proxy.snapshot())
    total = wire_total(after) - wire_total(before)
    return {
        "seconds": seconds,
        "up_bytes": total,
        "up_bytes_per_s": round(total / seconds, 2),
        "by_path_per_s": rates(before, after, seconds),
        "events": events,
    }


def container_churn(engine: PrivateEngine, prefix: str):
    """Every EVENT_EVERY_S: a managed container started, removed half a period later."""

    def run(seconds: float) -> int:
        events, end, n = 0, time.monotonic() + seconds, 0
        while time.monotonic() + EVENT_EVERY_S <= end + 1:
            name = f"{prefix}-{n}"
            engine.docker(
                "run", "-d", "--name", name, "--label", f"{protocol.LABEL_MANAGED}=true", IMAGE, "sleep", "600"
            )
            time.sleep(EVENT_EVERY_S / 2)
            engine.docker("rm", "-f", name)
            time.sleep(EVENT_EVERY_S / 2)
            events, n = events + 2, n + 1
        time.sleep(max(0.0, end - time.monotonic()))
        return events

    return run


def stored_records(root: Path, since: float) -> dict[str, Any]:
    """What the backend stored since `since`: per kind (and inventory type) count and JSON
    bytes; detail heartbeats; the paths the changes records set (what moved)."""
    db = sqlite3.connect(root / "backend" / "backend.sqlite")
    try:
        rows = db.execute("SELECT kind, data FROM records WHERE received_at >= ?", (since,)).fetchall()
    finally:
        db.close()
    out: dict[str, Any] = {"paths": {}}
    for kind, raw in rows:
        data = json.loads(raw)
        key = f"{kind}.{data.get('type')}" if kind == protocol.INVENTORY else kind
        if kind == protocol.HEARTBEAT and "workers" in data:
            key = "heartbeat.detail"
        count, size = out.get(key, (0, 0))
        out[key] = (count + 1, size + len(raw))
        for path, _ in data.get("set") or ():
            name = ".".join(map(str, path))
            out["paths"][name] = out["paths"].get(name, 0) + 1
    return out


def measure(gpus: int, idle_s: float, events_s: float, root: Path, rdma: int = 0) -> dict[str, Any]:
    state = serving_gpus(root / "nvml", gpus)
    stop = threading.Event()
    mover = threading.Thread(target=move_gauges, args=(state, stop, random.Random(gpus)), daemon=True)
    result: dict[str, Any] = {"gpus": gpus, "links": LINKS, "rdma": rdma}
    env = state.env()
    if rdma:
        env["FADEN_NODE_AGENT_SYSFS_ROOT"] = str(FakeSysfs(root / "sys", gpus=gpus, nics=rdma).root)
    with metered_agent(root, env) as rig:
        try:
            mover.start()
            view = rig.backend.inventory(rig.node)["inventory"]
            result["full_record_bytes"] = len(json.dumps(view, separators=(",", ":")))
            for section in ("topology", "conditions", "labels"):
                result[f"{section}_bytes"] = len(json.dumps(view.get(section), separators=(",", ":")))
            since = time.time()
            result["idle"] = window(rig.proxy, idle_s)
            result["idle"]["records"] = stored_records(root, since)
            if events_s:
                since = time.time()
                churn = window(rig.proxy, events_s, container_churn(rig.engine, f"fxwire-{uuid.uuid4().hex[:6]}"))
                churn["records"] = stored_records(root, since)
                extra = churn["up_bytes"] - result["idle"]["up_bytes_per_s"] * events_s
                churn["bytes_per_event_over_idle"] = round(extra / max(churn["events"], 1))
                result["container_every_minute"] = churn
        finally:
            stop.set()
    return result


def own_network(nics: int) -> None:
    """Runs the rest of this bench in a network namespace of its own (re-executed under
    `unshare --net`), with loopback and `nics` interfaces (veth pairs standing for an eth0
    and the RDMA NICs of a GPU machine): the shared VM's interfaces and traffic belong to other work, which would
    make every round a change of the `network` section and a traffic record."""
    if os.environ.get("FXWIRE_NETNS") == "1":
        subprocess.run(["ip", "link", "set", "lo", "up"], check=True)
        names = ["eth0", *(f"ibp{n}s0" for n in range(1, nics))]
        for a, b in zip(names[::2], names[1::2], strict=False):  # veth pairs: no dummy module here
            subprocess.run(["ip", "link", "add", a, "type", "veth", "peer", "name", b], check=True)
        for n, name in enumerate(names[: len(names) // 2 * 2]):
            subprocess.run(["ip", "addr", "add", f"10.{n}.0.7/16", "dev", name], check=True)
            subprocess.run(["ip", "link", "set", name, "up"], check=True)
        return
    argv = ["unshare", "--net", "--", sys.executable, *sys.argv]
    os.execvpe("unshare", argv, {**os.environ, "FXWIRE_NETNS": "1"})


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gpus", type=int, nargs="+", default=[1, 8, 16])
    parser.add_argument("--window", type=float, default=600.0, help="idle seconds per GPU count")
    parser.add_argument("--events-window", type=float, default=300.0, help="seconds of container churn (0: none)")
    parser.add_argument("--json", type=Path)
    parser.add_argument("--nics", type=int, default=10, help="NICs of its own network namespace (veth pairs)")
    parser.add_argument("--rdma", type=int, default=0, help="RDMA NICs in a sysfs tree of its own (0: none)")
    parser.add_argument("--host-network", action="store_true", help="on the machine's own interfaces instead")
    args = parser.parse_args()
    if not args.host_network:
        own_network(args.nics)
    results = []
    for count in args.gpus:
        with tempfile.TemporaryDirectory(prefix="fxwire-") as tmp:
            result = measure(count, args.window, args.events_window, Path(tmp), args.rdma)
        results.append(result)
        idle, churn = result["idle"], result.get("container_every_minute")
        line = f"{count:3d} GPUs x {LINKS} links, {args.rdma} RDMA NICs: idle {idle['up_bytes_per_s']:.1f} B/s"
        line += f" over {idle['seconds']:.0f} s (full record {result['full_record_bytes']} B, topology"
        line += f" {result['topology_bytes']} B, conditions {result['conditions_bytes']} B)"
        if churn:
            line += f"; churn {churn['up_bytes_per_s']:.1f} B/s, {churn['bytes_per_event_over_idle']} B per event"
        print(line, flush=True)
        print("   idle by path (B/s):", json.dumps(idle["by_path_per_s"]), flush=True)
        print("   idle records stored (count, JSON bytes):", json.dumps(idle["records"]), flush=True)
        if churn:
            print("   churn by path (B/s):", json.dumps(churn["by_path_per_s"]), flush=True)
            print("   churn records stored (count, JSON bytes):", json.dumps(churn["records"]), flush=True)
    if args.json:
        args.json.write_text(json.dumps(results, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
