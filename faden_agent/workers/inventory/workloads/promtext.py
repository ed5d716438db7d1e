"""The few samples of a Prometheus text exposition that tell a serving engine's progress:
per name, the sum over every label set (several models, replicas). Unknown lines are
skipped; a line over MAX_LINE_BYTES is skipped whole, so garbage costs no memory."""

from __future__ import annotations

import math
from collections.abc import Iterable

MAX_LINE_BYTES = 16 << 10

# What is in flight now (gauges) and what moves while work gets done (counters), by engine.
# vLLM V0 and V1 share the gauges and the token counters; V1 adds the per-step histogram,
# whose _count is the engine's iteration counter. Ray Serve: the replica's queries being
# processed, the router's queue, and the queries each deployment finished (counter as
# `_total` since Ray 2.10, as a gauge without the suffix before).
BUSY = {
    "vllm": ("vllm:num_requests_running", "vllm:num_requests_waiting"),
    "ray_serve": (
        "ray_serve_replica_processing_queries",
        "ray_serve_deployment_queued_queries",
        "ray_serve_num_ongoing_http_requests",
    ),
}
PROGRESS = {
    "vllm": (
        "vllm:generation_tokens_total",
        "vllm:prompt_tokens_total",
        "vllm:iteration_tokens_total_count",
    ),
    "ray_serve": ("ray_serve_deployment_request_counter_total", "ray_serve_deployment_request_counter"),
}
WANTED = frozenset(name for names in (*BUSY.values(), *PROGRESS.values()) for name in names)


def parse_line(line: bytes) -> tuple[str, float] | None:
    """(name, value) of one sample line whose name is WANTED; None for anything else."""
    if not line or line[:1] == b"#" or len(line) > MAX_LINE_BYTES:
        return None
    try:
        text = line.decode("ascii").strip()
    except UnicodeDecodeError:
        return None
    brace = text.find("{")
    if brace >= 0:
        name, rest = text[:brace], text[text.rfind("}") + 1 :]
    else:
        name, _, rest = text.partition(" ")
    if name not in WANTED:
        return None
    fields = rest.split()
    if not fields:
        return None
    try:
        value = float(fields[0])
    except ValueError:
        return None
    return (name, value) if math.isfinite(value) else None


def add_samples(totals: dict[str, float], lines: Iterable[bytes]) -> None:
    """Sum the WANTED samples of `lines` into `totals`."""
    for line in lines:
        sample = parse_line(line)
        if sample is not None:
            totals[sample[0]] = totals.get(sample[0], 0.0) + sample[1]
