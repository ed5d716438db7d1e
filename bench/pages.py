"""Where a process's resident memory is, read from /proc (root for pagemap): PSS per kind of
mapping (smaps), and each page's frame, to split pages among a chosen set of processes only
(the PSS a quiet machine would read) and to tell a forked worker's inherited pages from the
ones it copied or made (pagemap)."""

from __future__ import annotations

import contextlib
import os
import re
import struct
from typing import Any

PAGE = os.sysconf("SC_PAGE_SIZE")
PFN_MASK = (1 << 55) - 1
SITE_PACKAGE = re.compile(r"/site-packages/([A-Za-z0-9_]+?)(?:\.libs)?/")
DYNLOAD = re.compile(r"/lib-dynload/([A-Za-z0-9_]+)\.")


def mapping_group(path: str) -> str:
    """The account's name for one mapping of /proc/PID/smaps: anonymous memory (the Python
    and C heaps, stacks), libpython, an extension module's package, a system library."""
    if not path or path.startswith("[anon") or path in ("[heap]", "[stack]"):
        return "[heap]" if path == "[heap]" else "anonymous"
    if path.startswith("["):
        return path
    if "libpython" in path:
        return "libpython"
    if match := SITE_PACKAGE.search(path):
        return f"ext {match.group(1)}"
    if match := DYNLOAD.search(path):
        return f"stdlib {match.group(1)}"
    name = os.path.basename(path).split(".so")[0]
    return name if name else path


def smaps_groups(pid: int) -> dict[str, int]:
    """{mapping group: PSS KiB} of one process, largest first."""
    groups: dict[str, int] = {}
    current = "anonymous"
    with open(f"/proc/{pid}/smaps") as smaps:
        for line in smaps:
            head = line.split(None, 5)
            if "-" in head[0] and len(head) >= 5 and not head[0].endswith(":"):
                current = mapping_group(head[5].strip() if len(head) > 5 else "")
            elif head[0] == "Pss:":
                groups[current] = groups.get(current, 0) + int(head[1])
    return dict(sorted(groups.items(), key=lambda kv: -kv[1]))


ANONYMOUS = ("anonymous", "[heap]", "[stack]")


def page_table(pid: int) -> dict[int, tuple[int, str]]:
    """{virtual page: (page frame, its mapping's group: mapping_group())} of every resident
    page of a process (/proc/PID/pagemap, root)."""
    table = {}
    with open(f"/proc/{pid}/maps") as maps, open(f"/proc/{pid}/pagemap", "rb") as pagemap:
        for line in maps:
            fields = line.split(None, 5)
            if "[vsyscall]" in line:
                continue
            start, end = (int(x, 16) for x in fields[0].split("-"))
            group = mapping_group(fields[5].strip() if len(fields) > 5 else "")
            pagemap.seek(start // PAGE * 8)
            entries = pagemap.read((end - start) // PAGE * 8)
            for index, (entry,) in enumerate(struct.iter_unpack("<Q", entries)):
                if entry >> 63 and entry & PFN_MASK:
                    table[start // PAGE + index] = (entry & PFN_MASK, group)
    return table


def page_account(tree: dict[str, int], beside: list[int]) -> dict[str, dict[str, Any]]:
    """Per process of the tree, KiB: "pss_quiet", its PSS with each resident page split
    among the tree and the `beside` processes only (the bench and its backend, which map
    the same interpreter: what PSS reads on a machine where nothing else runs; it does not
    move with the other work on a shared machine), and "quiet_by_mapping" the same by
    mapping_group(); for a worker, its anonymous pages by
    origin: "inherited" (still the supervisor's), "copied" (the supervisor's address, a copy
    of its own: written since the fork) and "own" (an address the supervisor has not)."""
    tables = {}
    for name, pid in tree.items():
        with contextlib.suppress(OSError):
            tables[name] = page_table(pid)
    mappers: dict[int, int] = {}
    for table in tables.values():
        for frame, _ in table.values():
            mappers[frame] = mappers.get(frame, 0) + 1
    for pid in beside:
        with contextlib.suppress(OSError):
            for frame in {frame for frame, _ in page_table(pid).values()}:
                if frame in mappers:
                    mappers[frame] += 1
    supervisor = tables.get("supervisor", {})
    out = {}
    for name, table in tables.items():
        by_group: dict[str, float] = {}
        for frame, group in table.values():
            by_group[group] = by_group.get(group, 0.0) + PAGE / mappers[frame]
        figures: dict[str, Any] = {
            "pss_quiet": round(sum(by_group.values()) / 1024),
            "quiet_by_mapping": {g: round(b / 1024) for g, b in sorted(by_group.items(), key=lambda kv: -kv[1])},
        }
        if name != "supervisor" and "(child of" not in name:
            origin = {"inherited": 0, "copied": 0, "own": 0}
            for page, (frame, group) in table.items():
                if group in ANONYMOUS:
                    was = supervisor.get(page)
                    origin["own" if was is None else "inherited" if was[0] == frame else "copied"] += PAGE // 1024
            figures.update(origin)
        out[name] = figures
    return out
