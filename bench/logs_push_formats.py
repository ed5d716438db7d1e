"""What each Loki push format costs, per line, the shipper and a real Loki 3.4.6.

The same N journal-like lines (structured metadata as the journal source makes it) are
pushed by the agent's own Pusher and DirectLoki, in batches of --batch, from 4 threads as
the shipper does, once per format: JSON, JSON+gzip, protobuf+snappy. Printed per format:
the pushing side's CPU (encode + compress + HTTP), Loki's CPU, and the wall time, each per
100,000 lines. Formats alternate over --rounds rounds; the median is shown.

    python bench/logs_push_formats.py [--lines 100000] [--batch 100] [--rounds 3]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import psutil

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from faden_agent.config import load_config
from faden_agent.workers.logs.entry import Entry
from faden_agent.workers.logs.loki import destinations as targets
from faden_agent.workers.logs.loki.client import MAX_PUSHES_IN_FLIGHT, Pusher
from tests.support.lokiproc import LokiProcess, count

METADATA = {"unit": "bench.service", "syslog_identifier": "bench", "pid": "4242", "boot_id": "0" * 32}
NO_RATE_LIMIT = [
    "-distributor.ingestion-rate-limit-mb=1000",
    "-distributor.ingestion-burst-size-mb=1000",
    "-ingester.per-stream-rate-limit=1000MB",
    "-ingester.per-stream-rate-limit-burst=1000MB",
]
FORMATS = ("json", "json+gzip", "protobuf+snappy")


def batches(tag: str, lines: int, batch: int) -> list[list[Entry]]:
    labels = (("agent_id", tag), ("job", "node-agent"), ("level", "info"))
    now = time.time_ns()
    entries = [
        Entry(labels, now + i * 1000, f"bench line {i:07d} " + "payload " * 8, METADATA, "journal", i)
        for i in range(lines)
    ]
    return [entries[i : i + batch] for i in range(0, lines, batch)]


def pusher(loki: LokiProcess, root: Path, form: str) -> Pusher:
    config = load_config(
        {},
        loki_url=loki.url,
        state_path=root / "state.json",
        loki_push_format="json" if form.startswith("json") else "protobuf",
    )
    target = targets.DirectLoki(config.loki_url, config)
    if form == "json":  # the body as is, no gzip

        def send(payload: bytes, content_type: str = targets.JSON) -> targets.Answer:
            return _plain(target, payload)

        target.send = send  # type: ignore[method-assign]
    made = Pusher(target, 0.05, 2.0, threading.Event().wait)
    made.metadata_target = str(target)  # the target takes metadata (3.4.6): no probe push
    return made


def _plain(target: targets.DirectLoki, payload: bytes) -> targets.Answer:
    conn, _ = target._connection(False)
    headers = {k: v for k, v in target._headers[targets.JSON].items() if k != "Content-Encoding"}
    reply = conn.post(target._path, headers, payload, targets.MAX_ANSWER_BYTES)
    return targets.Answer(reply.status, None, reply.body[:300].decode("utf-8", "replace"))


def run(loki: LokiProcess, root: Path, form: str, tag: str, lines: int, batch: int) -> dict[str, float]:
    work = batches(tag, lines, batch)
    push = pusher(loki, root, form)
    loki_proc = psutil.Process(loki.proc.pid)
    loki_before = sum(loki_proc.cpu_times()[:2])
    cpu_before = time.process_time()
    started = time.monotonic()
    with ThreadPoolExecutor(MAX_PUSHES_IN_FLIGHT) as pool:
        outcomes = list(pool.map(push.push, work))
    took = time.monotonic() - started
    cpu = time.process_time() - cpu_before
    loki_cpu = sum(loki_proc.cpu_times()[:2]) - loki_before
    assert sum(o.accepted for o in outcomes) == lines, "lines refused"
    deadline = time.monotonic() + 60
    while count(loki, f'{{agent_id="{tag}"}}', "3h") < lines:
        if time.monotonic() > deadline:
            raise TimeoutError(f"{form}: Loki does not hold {lines} lines")
        time.sleep(0.5)
    scale = 100_000 / lines
    return {"cpu": cpu * scale, "loki_cpu": loki_cpu * scale, "seconds": took * scale}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--lines", type=int, default=100_000)
    parser.add_argument("--batch", type=int, default=100)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    root = Path(tempfile.mkdtemp(prefix="faden-push-formats-"))
    results: dict[str, list[dict[str, float]]] = {form: [] for form in FORMATS}
    # Limits raised: the per-tenant rate limit (4 MB/s) would make this a bench of 429 retries.
    with LokiProcess("3.4.6", root / "loki" / "data", flags=NO_RATE_LIMIT) as loki:
        for round_no in range(args.rounds):
            for form in FORMATS:
                tag = f"fmt-{form.replace('+', '-')}-{round_no}-{time.time_ns()}"
                results[form].append(run(loki, root, form, tag, args.lines, args.batch))
    print(f"per 100,000 lines, batches of {args.batch}, median of {args.rounds} rounds")
    print(f"{'format':<18} {'shipper CPU s':>13} {'Loki CPU s':>10} {'sum':>6} {'wall s':>7}")
    for form in FORMATS:
        med = {k: statistics.median(r[k] for r in results[form]) for k in ("cpu", "loki_cpu", "seconds")}
        print(
            f"{form:<18} {med['cpu']:13.2f} {med['loki_cpu']:10.2f} {med['cpu'] + med['loki_cpu']:6.2f}"
            f" {med['seconds']:7.2f}"
        )


if __name__ == "__main__":
    main()
