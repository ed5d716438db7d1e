"""Where the idle tree's memory is: per process, per mapping and per module, against an older
tree of the agent (by default round 7 of the footprint work, 1 December: README's 49 MiB).

One idle production agent (footprint_bench.metered_agent: enrolled, a private engine, a
journal shipped to a Loki receiver, settled), started through bench/agent_probe.py so that
each Python process names its modules. Per process: PSS, private, anonymous PSS, the PSS a
quiet machine would read per mapping (bench/pages.py: libpython, each extension's package,
each system library, the heaps), a worker's anonymous pages by origin (inherited, copied
since the fork, its own), the modules it loaded after the fork; per module, the bytes of
Python objects its import leaves by itself (tracemalloc, self as -X importtime counts time).
--objects (a run of its own) names what each worker wrote on the pages only it holds: the
supervisor's objects (code by function, classes by module, dicts' key tables, lists' items,
sets' tables), else the worker's glibc heap chunk (used or free, by size) or a pool header.
--gpus N: the machine has N healthy GPUs (tests/nvml's C library with NVML's ABI, loaded by
the real bindings), as an operator's GPU node has: NVML loaded, its event watch and the
kernel lines read.

    python3 bench/footprint_account.py [--against 3e3435d|none] [--now COMMIT] [--python 3.11] [--gpus N]
                                       [--objects] [--json PATH]
"""

from __future__ import annotations

import argparse
import bisect
import json
import os
import signal
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench import footprint_bench, interpreters
from bench.pages import page_account, smaps_groups
from tests.support.agentproc import wait_for

REPO = Path(__file__).resolve().parents[1]
ROUND_7 = "3e3435d"  # docs: round 7 of the footprint work (README: "about 49 MiB")
PROBE = REPO / "bench" / "agent_probe.py"

# ---------------------------------------------------------------- modules


def probe_dumps(tree: dict[str, int], directory: Path) -> dict[str, dict[str, Any]]:
    """{process: what bench/agent_probe.py wrote of it}: SIGUSR2 to each Python process of the tree."""
    pythons = {name: pid for name, pid in tree.items() if "(child of" not in name}
    for pid in pythons.values():
        os.kill(pid, signal.SIGUSR2)
    wait_for(lambda: all((directory / f"{pid}.json").exists() for pid in pythons.values()), 15, 0.1, "probe dumps")
    return {name: json.loads((directory / f"{pid}.json").read_text()) for name, pid in pythons.items()}


def import_costs(python: str, source: Path, names: list[str], unit: str) -> dict[str, int]:
    """{module: what importing it costs by itself}: "bytes" of Python objects it leaves, or
    "cpu" ns, in a fresh interpreter importing `names` (bench/agent_probe.py imports)."""
    done = subprocess.run(
        [python, str(PROBE), "imports", str(source), unit],
        input=json.dumps(names),
        capture_output=True,
        text=True,
        cwd="/",
        check=True,
    )
    return json.loads(done.stdout)


def copied_objects(supervisor: int, worker: int, objects: Path, others: list[int]) -> dict[str, dict[str, Any]]:
    """What the worker wrote to on the pages it copied (its page's frame is neither the
    supervisor's nor that of any of the `others`, the other workers: a page the supervisor
    wrote after the fork is still shared by the workers): each copied page read in both processes
    (/proc/PID/mem) and every 8-byte word that differs laid on the supervisor's objects (at its
    first fork). {"on": {kind: KiB of objects on copied pages}, "written": {kind: KiB of pages
    that kind wrote to, a page shared by the kinds on it}}. A word in no listed object counts
    as "(no object listed)": allocator headers, C structures (a dict's key table), free blocks."""
    from bench.pages import ANONYMOUS, PAGE, page_table

    theirs, mine = page_table(supervisor), page_table(worker)
    elsewhere = [page_table(pid) for pid in others]
    copied = sorted(
        page
        for page, (frame, group) in mine.items()
        if group in ANONYMOUS
        and page in theirs
        and theirs[page][0] != frame
        and not any(table.get(page, (0,))[0] == frame for table in elsewhere)
    )
    listed = sorted(
        (int(address), max(int(size), 1), kind)
        for address, size, kind in (line.split(" ", 2) for line in objects.read_text().splitlines())
    )
    starts = [address for address, _, _ in listed]
    heap = heap_range(worker)
    chunks = heap_chunks(worker, heap)  # the worker's own layout: what it put on the pages it copied
    on: dict[str, int] = {}
    written: dict[str, float] = {}
    with open(f"/proc/{supervisor}/mem", "rb") as their_memory, open(f"/proc/{worker}/mem", "rb") as my_memory:
        for page in copied:
            try:
                their_memory.seek(page * PAGE)
                my_memory.seek(page * PAGE)
                before, after = (
                    memoryview(their_memory.read(PAGE)).cast("Q"),
                    memoryview(my_memory.read(PAGE)).cast("Q"),
                )
            except OSError:  # unmapped since
                continue
            writers = set()
            for word in (i for i in range(len(after)) if before[i] != after[i]):
                address = page * PAGE + word * 8
                index = bisect.bisect_right(starts, address) - 1
                hit = index >= 0 and listed[index][0] + listed[index][1] > address
                writers.add(listed[index][2] if hit else unlisted_place(address, heap, chunks))
            first = bisect.bisect_left(starts, page * PAGE)
            for address, size, kind in listed[max(first - 1, 0) : bisect.bisect_left(starts, (page + 1) * PAGE)]:
                if address + size > page * PAGE:
                    on[kind] = on.get(kind, 0) + size
            for kind in writers or {"(nothing differs)"}:
                written[kind] = written.get(kind, 0) + PAGE / len(writers or {0})
    return {
        "on": {kind: round(size / 1024) for kind, size in sorted(on.items(), key=lambda kv: -kv[1])},
        "written": {kind: round(size / 1024) for kind, size in sorted(written.items(), key=lambda kv: -kv[1])},
        "pages_copied_kib": {"all": len(copied) * PAGE // 1024},
    }


POOL = 16 << 10  # pymalloc's pools on 64-bit CPython 3.12: 16 KiB, aligned, a 48-byte header first


def heap_range(pid: int) -> tuple[int, int]:
    """glibc's main heap of a process: (start, end)."""
    with open(f"/proc/{pid}/maps") as maps:
        for line in maps:
            if line.rstrip().endswith("[heap]"):
                start, end = line.split()[0].split("-")
                return int(start, 16), int(end, 16)
    return 0, 0


def heap_chunks(pid: int, heap: tuple[int, int]) -> list[tuple[int, int, bool]]:
    """glibc's chunks of the main heap, walked from its start: (address, bytes, in use)."""
    with open(f"/proc/{pid}/mem", "rb") as memory:
        memory.seek(heap[0])
        data = memory.read(heap[1] - heap[0])
    chunks: list[tuple[int, int, bool]] = []
    offset = 0
    while offset + 16 <= len(data):
        size = int.from_bytes(data[offset + 8 : offset + 16], "little") & ~7
        if size < 16 or offset + size + 16 > len(data):
            break
        used = bool(int.from_bytes(data[offset + size + 8 : offset + size + 16], "little") & 1)
        chunks.append((heap[0] + offset, size, used))
        offset += size
    return chunks


def unlisted_place(address: int, heap: tuple[int, int], chunks: list[tuple[int, int, bool]]) -> str:
    """Where a written word that lies in no listed object is: a used or free chunk of the
    worker's glibc heap now (by size: most are the worker's own allocations placed in the
    supervisor's free space, which cost no more than fresh pages), or the header or a block of
    an (assumed) pymalloc pool elsewhere."""
    if heap[0] <= address < heap[1]:
        index = bisect.bisect_right(chunks, (address, 1 << 62, True)) - 1
        if index < 0:
            return "(no object listed: glibc heap)"
        _, size, used = chunks[index]
        band = next((f"<= {limit}" for limit in (64, 512, 4096, 65536) if size <= limit), "over 65536")
        return f"(no object listed: heap chunk {'used' if used else 'free'} {band})"
    return "(no object listed: pool header)" if address % POOL < 48 else "(no object listed: other anonymous)"


def feature_of(module: str) -> str:
    """The group a module is counted under: a third-party or stdlib top-level package, or the
    agent's package two or three levels down (faden_agent.workers.inventory.gpu)."""
    parts = module.split(".")
    if parts[0] != "faden_agent":
        return parts[0]
    depth = 4 if parts[1:2] == ["workers"] else 3
    return ".".join(parts[:depth])


def by_feature(names: list[str], costs: dict[str, int]) -> dict[str, dict[str, int]]:
    """{feature: {"modules": n, "kib": object KiB}}, largest first."""
    out: dict[str, dict[str, int]] = {}
    for name in names:
        group = out.setdefault(feature_of(name), {"modules": 0, "bytes": 0})
        group["modules"] += 1
        group["bytes"] += max(costs.get(name, 0), 0)
    return {
        k: {"modules": v["modules"], "kib": round(v["bytes"] / 1024)}
        for k, v in sorted(out.items(), key=lambda kv: -kv[1]["bytes"])
    }


# ---------------------------------------------------------------- one tree


def export_tree(commit: str, into: Path) -> Path:
    """The agent's sources at `commit`, unpacked into `into` (git archive)."""
    into.mkdir(parents=True)
    archive = subprocess.run(["git", "-C", str(REPO), "archive", commit], capture_output=True, check=True).stdout
    subprocess.run(["tar", "-x", "-C", str(into)], input=archive, check=True)
    return into


def run_from(python: str, source: Path) -> list[str]:
    """The start of an argv running `python -m faden_agent` with the agent imported from `source`."""
    code = "import runpy, sys; sys.path.insert(0, sys.argv.pop(1)); runpy.run_module('faden_agent', alter_sys=True)"
    return [python, "-c", code, str(source)]


def gpu_env(root: Path, gpus: int) -> dict[str, str]:
    """The environment of an agent on a machine with `gpus` healthy GPUs (none: {})."""
    if not gpus:
        return {}
    from tests.nvml.state import GpuState  # imports pynvml: only where GPUs are asked for

    return GpuState(root / "nvml", count=gpus).env()


def account_tree(root: Path, python: str, source: Path, objects: bool = False, gpus: int = 0) -> dict[str, Any]:
    """The account of one idle tree: the agent and its backend both from `source`, on a
    machine with `gpus` GPUs; with `objects`, what the supervisor's objects on each worker's
    copied pages are (a run of its own: listing them changes the supervisor's heap)."""
    dumps = root / "modules"
    dumps.mkdir()
    interpreters.compile_agent(python, source)
    argv = [python, str(PROBE), "run", str(dumps), str(source)] + (["--objects"] if objects else [])
    with footprint_bench.metered_agent(
        root, extra_env=gpu_env(root, gpus), agent_argv=argv, backend_runner=run_from(python, source)
    ) as rig:
        tree = footprint_bench.named_tree(rig.agent)
        memory = {name: footprint_bench.smaps_kib(pid) for name, pid in tree.items()}
        mappings = {name: smaps_groups(pid) for name, pid in tree.items()}
        pages = page_account(tree, [os.getpid(), rig.backend.proc.pid])
        probes = probe_dumps(tree, dumps)
        if objects:
            listing = dumps / f"objects-{tree['supervisor']}.txt"
            workers = {name: pid for name, pid in tree.items() if name != "supervisor" and "(child of" not in name}
            on_copied = {
                name: copied_objects(tree["supervisor"], pid, listing, [p for p in workers.values() if p != pid])
                for name, pid in workers.items()
            }
    modules = {name: probe["modules"] for name, probe in probes.items()}
    every = [m for m in dict.fromkeys(m for names in modules.values() for m in names) if not m.endswith("__main__")]
    costs = import_costs(python, source, every, "bytes")
    forked_with = set(modules.get("supervisor", []))
    processes = {}
    for name, kib in memory.items():
        own = sorted(set(modules.get(name, [])) - forked_with) if name != "supervisor" else modules.get(name, [])
        processes[name] = {
            **kib,
            **pages.get(name, {}),
            "mappings_kib": mappings[name],
            "modules": len(modules.get(name, [])),
            "import_cpu_ms": round(sum(probes[name]["import_self_ns"].values()) / 1e6, 1) if name in probes else 0,
            "modules_after_fork" if name != "supervisor" else "modules_held": by_feature(own, costs),
        }
    return {
        **({"objects_on_copied_pages_kib": on_copied} if objects else {}),
        "python": version_of(python),
        "gpus": gpus,
        "tree_pss_kib": sum(m["pss"] for m in memory.values()),
        "tree_private_kib": sum(m["private"] for m in memory.values()),
        "tree_pss_quiet_kib": sum(p.get("pss_quiet", 0) for p in pages.values()),
        "processes": processes,
        "module_names": modules,
        "module_bytes": costs,
    }


def version_of(python: str) -> str:
    return subprocess.run(
        [python, "-c", "import sys; print('%d.%d.%d' % sys.version_info[:3])"], capture_output=True, text=True
    ).stdout.strip()


# ---------------------------------------------------------------- against an older tree


def compare(old: dict[str, Any], new: dict[str, Any]) -> dict[str, Any]:
    """Per process: PSS then and now, and the features whose modules it holds now and did not
    then (object KiB), largest first."""
    out: dict[str, Any] = {"tree_pss_kib": [old["tree_pss_kib"], new["tree_pss_kib"]], "processes": {}}
    for name, now in new["processes"].items():
        then = old["processes"].get(name, {})
        new_names = set(new["module_names"].get(name, []))
        old_names = set(old["module_names"].get(name, []))
        added = by_feature(sorted(new_names - old_names), new["module_bytes"])
        gone = by_feature(sorted(old_names - new_names), old["module_bytes"])
        out["processes"][name] = {
            "pss_kib": [then.get("pss"), now["pss"]],
            "private_kib": [then.get("private"), now["private"]],
            "modules": [len(old_names), len(new_names)],
            "added": {k: v for k, v in added.items() if v["kib"] >= 16},
            "gone": {k: v for k, v in gone.items() if v["kib"] >= 16},
        }
    return out


def report(result: dict[str, Any]) -> None:
    for label in ("against", "now"):
        tree = result.get(label)
        if not tree:
            continue
        print(
            f"== {label}: CPython {tree['python']}, {tree.get('gpus', 0)} GPUs, "
            f"tree {tree['tree_pss_kib'] / 1024:.1f} MiB PSS, "
            f"{tree['tree_pss_quiet_kib'] / 1024:.1f} MiB on a quiet machine"
        )
        for name, proc in tree["processes"].items():
            maps = ", ".join(f"{k} {v / 1024:.1f}" for k, v in list(proc.get("quiet_by_mapping", {}).items())[:8])
            print(
                f"  {name:<28} PSS {proc['pss'] / 1024:5.1f} (quiet {proc.get('pss_quiet', 0) / 1024:5.1f})  "
                f"private {proc['private'] / 1024:5.1f}  "
                f"anon {proc['pss_anon'] / 1024:5.1f}  modules {proc['modules']}  | {maps}"
            )
            if "copied" in proc:
                print(
                    f"  {'':<28} anonymous pages: inherited {proc['inherited'] / 1024:.1f}, copied "
                    f"{proc['copied'] / 1024:.1f}, own {proc['own'] / 1024:.1f} MiB"
                )
            held = proc.get("modules_after_fork") or proc.get("modules_held") or {}
            top = ", ".join(f"{k} {v['kib']}" for k, v in list(held.items())[:10])
            print(f"  {'':<28} {'after fork' if 'modules_after_fork' in proc else 'held'} (object KiB): {top}")
    if "compare" in result:
        comparison = result["compare"]
        old, new = comparison["tree_pss_kib"]
        print(f"== then -> now: tree {old / 1024:.1f} -> {new / 1024:.1f} MiB")
        for name, proc in comparison["processes"].items():
            then, now = proc["pss_kib"]
            print(f"  {name:<28} {(then or 0) / 1024:5.1f} -> {now / 1024:5.1f} MiB; modules {proc['modules']}")
            print("    added: " + ", ".join(f"{k} {v['kib']}" for k, v in list(proc["added"].items())[:12]))
            if proc["gone"]:
                print("    gone:  " + ", ".join(f"{k} {v['kib']}" for k, v in list(proc["gone"].items())[:8]))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--against", default=ROUND_7, help="the older tree's commit, or 'none'")
    parser.add_argument("--now", help="the newer tree's commit (default: this working tree)")
    parser.add_argument("--python", help="the CPython version to run both trees on (default: the bench's)")
    parser.add_argument("--gpus", type=int, default=0, help="GPUs the machine has (tests/nvml's C library)")
    parser.add_argument("--json", type=Path, default=Path("bench/results/account.json"))
    parser.add_argument(
        "--objects", action="store_true", help="only: what the supervisor's objects on each worker's copied pages are"
    )
    args = parser.parse_args()
    python = interpreters.with_agent(interpreters.cpythons()[args.python]) if args.python else sys.executable
    result: dict[str, Any] = {}
    with tempfile.TemporaryDirectory(prefix="faden-account-") as tmp:
        root = Path(tmp)
        if args.objects:
            (root / "objects").mkdir()
            copied = account_tree(root / "objects", python, REPO, objects=True, gpus=args.gpus)[
                "objects_on_copied_pages_kib"
            ]
            for name, kinds in copied.items():
                print(
                    f"{name}: {kinds['pages_copied_kib']['all']} KiB copied; written by (KiB of pages): "
                    + ", ".join(f"{k} {v}" for k, v in list(kinds["written"].items())[:16])
                )
            args.json.parent.mkdir(parents=True, exist_ok=True)
            args.json.write_text(json.dumps(copied, indent=1) + "\n")
            return 0
        (root / "now").mkdir()
        now_source = export_tree(args.now, root / "now-source") if args.now else REPO
        result["now"] = account_tree(root / "now", python, now_source, gpus=args.gpus)
        if args.now:
            result["now"]["commit"] = args.now
        if args.against != "none":
            old_source = export_tree(args.against, root / "old-source")
            (root / "old").mkdir()
            result["against"] = account_tree(root / "old", python, old_source, gpus=args.gpus)
            result["against"]["commit"] = args.against
            result["compare"] = compare(result["against"], result["now"])
    report(result)
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(result, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
