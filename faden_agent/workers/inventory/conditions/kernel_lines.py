"""One kernel log line -> the node condition signal it carries, or None: hung tasks, soft and
hard lockups, machine checks, EDAC memory errors, the OOM killer and its victim. Pure: no reader,
no state (a follower of the kernel's lines feeds it). A line is cut to MAX_LINE characters first,
and every field taken from it to MAX_FIELD: a hostile line costs one bounded match."""

from __future__ import annotations

import re
from collections.abc import Mapping
from types import MappingProxyType
from typing import NamedTuple

MAX_LINE = 1024
MAX_FIELD = 64

HUNG_TASK = "hung_task"
SOFT_LOCKUP = "soft_lockup"
HARD_LOCKUP = "hard_lockup"
MACHINE_CHECK = "machine_check"
MEMORY_CORRECTED = "memory_corrected"  # EDAC CE
MEMORY_UNCORRECTED = "memory_uncorrected"  # EDAC UE
OOM_KILL = "oom_kill"
KINDS = (HUNG_TASK, SOFT_LOCKUP, HARD_LOCKUP, MACHINE_CHECK, MEMORY_CORRECTED, MEMORY_UNCORRECTED, OOM_KILL)


class KernelSignal(NamedTuple):
    kind: str  # one of KINDS
    detail: Mapping[str, str | int] = MappingProxyType({})  # fields of the line, bounded; read only


# (kind, pattern): the first that matches wins. Written after the kernel's own format strings
# (kernel/hung_task.c, kernel/watchdog.c, arch/x86/kernel/cpu/mce, drivers/edac/edac_mc.c,
# mm/oom_kill.c); a leading "[  12.345678] " or "kernel: " is allowed, as journald and dmesg add.
_PATTERNS: tuple[tuple[str, re.Pattern[str]], ...] = (
    (
        HUNG_TASK,
        re.compile(
            r"INFO: task (?P<task>.{1,64}?):(?P<pid>\d{1,10}) blocked for more than (?P<seconds>\d{1,10}) seconds\."
        ),
    ),
    (
        SOFT_LOCKUP,
        re.compile(
            r"BUG: soft lockup - CPU#(?P<cpu>\d{1,6}) stuck for (?P<seconds>\d{1,10})s!"
            r"(?: \[(?P<task>.{1,64}?):(?P<pid>\d{1,10})\])?"
        ),
    ),
    (HARD_LOCKUP, re.compile(r"Watchdog detected hard LOCKUP on cpu (?P<cpu>\d{1,6})")),
    (MEMORY_UNCORRECTED, re.compile(r"EDAC (?P<controller>MC\d{1,4}): (?P<count>\d{1,10}) UE (?P<what>.{0,64})")),
    (MEMORY_CORRECTED, re.compile(r"EDAC (?P<controller>MC\d{1,4}): (?P<count>\d{1,10}) CE (?P<what>.{0,64})")),
    (MACHINE_CHECK, re.compile(r"\[Hardware Error\]: (?P<what>.{0,64})")),  # its severity: _machine_check
    (
        OOM_KILL,
        re.compile(
            r"(?P<scope>Memory cgroup )?[Oo]ut of memory: Killed process (?P<pid>\d{1,10}) \((?P<task>.{1,64}?)\)"
        ),
    ),
    (OOM_KILL, re.compile(r"oom-kill:(?P<fields>constraint=.{0,900})")),
)
_INTS = ("pid", "seconds", "cpu", "count")
# words every pattern above needs: nearly every kernel line is turned away by these tests alone
_WORDS = (
    "blocked for more than",
    "soft lockup",
    "hard LOCKUP",
    "[Hardware Error]",
    "EDAC MC",
    "Killed process",
    "oom-kill:",
)


def classify(line: str) -> KernelSignal | None:
    """The signal one kernel line carries; None for any other line."""
    line = line[:MAX_LINE]
    if not any(word in line for word in _WORDS):
        return None
    for kind, pattern in _PATTERNS:
        found = pattern.search(line)
        if found is None:
            continue
        groups = {k: v for k, v in found.groupdict().items() if v is not None}
        if "fields" in groups:
            return KernelSignal(kind, _oom_fields(groups["fields"]))
        if kind == MACHINE_CHECK:
            severity = _machine_check(line[found.start() :])
            if severity is None:
                return None  # a detail line of a record (TSC, RIP, PROCESSOR, ...): its severity line counted
            groups["severity"] = severity
        detail: dict[str, str | int] = {}
        for key, value in groups.items():
            if key == "scope":
                continue
            detail[key] = int(value) if key in _INTS else value.strip()[:MAX_FIELD]
        if kind == OOM_KILL:
            detail["scope"] = "cgroup" if groups.get("scope") else "system"
        return KernelSignal(kind, detail)
    return None


_MCE_STATUS = re.compile(r"Machine Check( Exception)?: \S{1,18} Bank \d{1,4}: ([0-9a-fA-F]{16})")
_GHES_SEVERITY = re.compile(r"event severity: (corrected|recoverable|fatal)")
MCI_STATUS_UC = 1 << 61  # the bank's status: the error was not corrected


def _machine_check(text: str) -> str | None:
    """`corrected` or `uncorrected`, from the line that says which (x86's bank status, where a
    Machine Check Exception is uncorrected by definition; APEI's event severity; the decoders'
    words); None for the record's other lines."""
    if found := _MCE_STATUS.search(text):
        return "uncorrected" if found.group(1) or int(found.group(2), 16) & MCI_STATUS_UC else "corrected"
    if found := _GHES_SEVERITY.search(text):
        return "corrected" if found.group(1) == "corrected" else "uncorrected"
    if "Machine check events logged" in text or "Corrected error" in text:
        return "corrected"
    if "Uncorrected" in text or "uncorrectable" in text:
        return "uncorrected"
    return None


def _oom_fields(text: str) -> dict[str, str | int]:
    """`constraint=CONSTRAINT_NONE,...,global_oom,task_memcg=/...,task=python,pid=1234,uid=0`:
    the victim and whether the whole machine (global_oom) or one cgroup (oom_memcg) ran out."""
    pairs = dict(part.partition("=")[::2] for part in text.split(",") if part)
    detail: dict[str, str | int] = {"scope": "cgroup" if "oom_memcg" in pairs else "system"}
    if pairs.get("task"):
        detail["task"] = pairs["task"][:MAX_FIELD]
    if pairs.get("pid", "").isdigit() and len(pairs["pid"]) <= 10:
        detail["pid"] = int(pairs["pid"])
    if pairs.get("task_memcg"):
        detail["cgroup"] = pairs["task_memcg"][: MAX_FIELD * 2]
    return detail
