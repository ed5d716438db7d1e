"""The footprint figures README.md and docs/benchmarks.md quote, kept in bench/figures.json (the
last measurement) and rendered between marker comments: `python3 bench/run_all.py --write-docs`
measures, merges what it measured into the file and rewrites both; `--docs-only` rewrites
them from the file. tests/unit/common/test_figures.py fails when a document is not the file's.
"""

from __future__ import annotations

import json
import statistics
from pathlib import Path
from typing import Any

from faden_agent.cli import doctable

REPO = Path(__file__).resolve().parents[1]
FIGURES = REPO / "bench" / "figures.json"
COMMAND = "python3 bench/run_all.py --write-docs"
SOURCE = "bench/figures.json, the last measurement"
SUMMARY = ("figures", f"<!-- figures: generated from {SOURCE}; measure, then run: {COMMAND} -->", "<!-- /figures -->")
BUDGET = ("budget", f"<!-- budget: generated from {SOURCE}; measure, then run: {COMMAND} -->", "<!-- /budget -->")
DOCUMENTS = {"README.md": (SUMMARY,), "docs/benchmarks.md": (SUMMARY, BUDGET)}
GOALS = {"3.12": 50.0, "3.11": 60.0}  # MiB of PSS, the idle tree on a quiet machine
# the run_all.py section that measures each figure
SECTION_OF = {
    "idle": "footprint",
    "idle_cpu_percent": "footprint",
    "idle_uplink_b_per_s": "footprint",
    "start": "start",
    "logs_vs_promtail": "promtail",
}


def mib(kib: float) -> float:
    return round(kib / 1024, 1)


def idle_figures(memory: dict[str, Any], cpu: dict[str, Any] | None) -> dict[str, Any]:
    """One interpreter's idle tree from footprint_bench.memory() (and idle_window()'s CPU)."""
    per = memory["per_process_kib"]
    processes = {
        name.split(" (child of")[0]: {
            "pss_quiet_mib": mib(m.get("pss_quiet", m["pss"])),
            "pss_mib": mib(m["pss"]),
            **({"cpu_percent": cpu["per_process"][name]["cpu_percent"]} if cpu and name in cpu["per_process"] else {}),
        }
        for name, m in per.items()
    }
    return {
        "tree_pss_quiet_mib": mib(memory.get("tree_pss_quiet_kib", memory["tree_pss_kib"])),
        "tree_pss_mib": mib(memory["tree_pss_kib"]),
        "processes": processes,
    }


def from_results(results: dict[str, Any]) -> dict[str, Any]:
    """The figures a run_all.py run measured (only its sections'), ready to merge."""
    out: dict[str, Any] = {}
    footprint = results.get("footprint")
    if footprint:
        python = ".".join(footprint["python"].split(".")[:2])
        idle = {python: idle_figures(footprint["memory"], footprint.get("idle_0"))}
        for version, memory in footprint.get("memory_by_python", {}).items():
            if version != python and "tree_pss_kib" in memory:
                idle[version] = idle_figures(memory, None)
        out["idle"] = idle
        out["idle_cpu_percent"] = footprint["idle_0"]["tree_cpu_percent"]
        out["idle_uplink_b_per_s"] = footprint["idle_0"]["uplink_b_per_s"]
    start = results.get("start")
    if start:
        out["start"] = {
            "python": start["python"],
            "tree_cpu_s": round(start["tree_cpu_s_median"], 3),
            "supervisor_cpu_s": round(start["supervisor_cpu_s_median"], 3),
            "starts": len(start["tree_cpu_s_all"]),
        }
    promtail = results.get("promtail")
    if promtail:
        out["logs_vs_promtail"] = {
            "tree_cpu_ratio": round(statistics.median(r[0] for r in promtail["ratios"]), 2),
            "rounds": len(promtail["ratios"]),
        }
    return out


def merged(old: dict[str, Any], new: dict[str, Any], measured: dict[str, Any]) -> dict[str, Any]:
    """`old` with each figure `new` holds replaced (an interpreter's idle tree by itself), and
    when each was measured."""
    out = json.loads(json.dumps(old))
    for key, value in new.items():
        if key == "idle":
            out.setdefault("idle", {}).update(value)
        else:
            out[key] = value
        out.setdefault("measured", {})[key] = measured
    return out


def load(path: Path = FIGURES) -> dict[str, Any]:
    return json.loads(path.read_text()) if path.exists() else {}


def when(figures: dict[str, Any], key: str) -> str:
    m = figures.get("measured", {}).get(key)
    return f"{m['date']}, {m['commit']}, load {m['load']}" if m else "not measured"


def summary_rows(figures: dict[str, Any]) -> list[tuple[str, str, str, str]]:
    """(figure, the key of when it was measured, value, goal) of each figure the file holds."""
    rows = []
    for version, goal in GOALS.items():
        if idle := figures.get("idle", {}).get(version):
            rows.append(
                (
                    f"idle tree PSS, CPython {version} (a quiet machine)",
                    "idle",
                    f"{idle['tree_pss_quiet_mib']} MiB",
                    f"<= {goal:g} MiB",
                )
            )
    if "idle_cpu_percent" in figures:
        rows.append(("idle CPU, whole tree", "idle_cpu_percent", f"{figures['idle_cpu_percent']} %", "<= 0.3 %"))
    if "idle_uplink_b_per_s" in figures:
        rows.append(("idle uplink", "idle_uplink_b_per_s", f"{figures['idle_uplink_b_per_s']} B/s", "<= 50 B/s"))
    if start := figures.get("start"):
        rows.append(
            (
                f"start, whole tree to every worker RUNNING (CPython {start['python']})",
                "start",
                f"{start['tree_cpu_s']} CPU s (supervisor {start['supervisor_cpu_s']})",
                "<= 0.25 CPU s",
            )
        )
    if logs := figures.get("logs_vs_promtail"):
        rows.append(
            (
                "log path CPU beside Promtail 2.8.0, start included",
                "logs_vs_promtail",
                f"{logs['tree_cpu_ratio']}x (median of {logs['rounds']})",
                "<= 0.8x",
            )
        )
    return rows


def render_summary(figures: dict[str, Any]) -> str:
    rows = ["| figure | last measured | value | goal |", "| --- | --- | --- | --- |"]
    for figure, key, value, goal in summary_rows(figures):
        rows.append(doctable.cells_row(figure, (figure, when(figures, key), value, goal)))
    return "\n".join(rows)


def render_budget(figures: dict[str, Any]) -> str:
    """Per process of the idle tree: PSS on each interpreter measured, and idle CPU."""
    idle = figures.get("idle", {})
    versions = [v for v in GOALS if v in idle] + sorted(v for v in idle if v not in GOALS)
    # sorted: the run that measured holds them in its own order, the file (sort_keys) in another
    names = sorted({n for v in versions for n in idle[v]["processes"]})
    head = ["process", *(f"PSS {v}, MiB" for v in versions), "idle CPU, % of a core"]
    rows = ["| " + " | ".join(head) + " |", "|" + " --- |" * len(head)]
    for name in names:
        cells = [name]
        cpu = "-"
        for version in versions:
            proc = idle[version]["processes"].get(name)
            cells.append(f"{proc['pss_quiet_mib']}" if proc else "-")
            if proc and "cpu_percent" in proc:
                cpu = f"{proc['cpu_percent']}"
        rows.append(doctable.cells_row(name, (*cells, cpu)))
    total = [
        "whole tree",
        *(f"{idle[v]['tree_pss_quiet_mib']}" for v in versions),
        f"{figures.get('idle_cpu_percent', '-')}",
    ]
    rows.append(doctable.cells_row("tree", tuple(f"**{cell}**" for cell in total)))
    return "\n".join(rows)


RENDER = {"figures": render_summary, "budget": render_budget}


def with_blocks(text: str, figures: dict[str, Any], blocks: tuple[tuple[str, str, str], ...]) -> str:
    for what, begin, end in blocks:
        text = doctable.with_table(text, begin, end, RENDER[what](figures), what)
    return text


def write_docs(figures: dict[str, Any], repo: Path = REPO) -> list[str]:
    """Rewrites each document's blocks; the documents that changed."""
    changed = []
    for name, blocks in DOCUMENTS.items():
        path = repo / name
        text = path.read_text()
        new = with_blocks(text, figures, blocks)
        if new != text:
            path.write_text(new)
            changed.append(name)
    return changed
