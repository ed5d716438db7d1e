"""The kernel line classifiers (conditions/kernel_lines.py) over the kernel's own line forms, as
journald and dmesg carry them, and over hostile lines: bounded, and None for anything else."""

from __future__ import annotations

import pytest

from faden_agent.workers.inventory.conditions.kernel_lines import (
    HARD_LOCKUP,
    HUNG_TASK,
    MACHINE_CHECK,
    MAX_FIELD,
    MAX_LINE,
    MEMORY_CORRECTED,
    MEMORY_UNCORRECTED,
    OOM_KILL,
    SOFT_LOCKUP,
    classify,
)

LINES = [
    (
        "INFO: task X:123 blocked for more than 120 seconds.",
        HUNG_TASK,
        {"task": "X", "pid": 123, "seconds": 120},
    ),
    (  # a task name with a colon, as kworkers have, and dmesg's time stamp before it
        "[ 3626.421877] INFO: task kworker/u16:3:8123 blocked for more than 122 seconds.",
        HUNG_TASK,
        {"task": "kworker/u16:3", "pid": 8123, "seconds": 122},
    ),
    (
        "watchdog: BUG: soft lockup - CPU#3 stuck for 22s! [python3:4567]",
        SOFT_LOCKUP,
        {"cpu": 3, "seconds": 22, "task": "python3", "pid": 4567},
    ),
    ("watchdog: BUG: soft lockup - CPU#3 stuck for 22s!", SOFT_LOCKUP, {"cpu": 3, "seconds": 22}),
    ("NMI watchdog: Watchdog detected hard LOCKUP on cpu 5", HARD_LOCKUP, {"cpu": 5}),
    (  # x86 after logging a polled (corrected) event
        "mce: [Hardware Error]: Machine check events logged",
        MACHINE_CHECK,
        {"what": "Machine check events logged", "severity": "corrected"},
    ),
    (  # a logged bank whose status has UC (bit 61) set
        "mce: [Hardware Error]: CPU 0: Machine Check: 0 Bank 5: be00000000800400",
        MACHINE_CHECK,
        {"what": "CPU 0: Machine Check: 0 Bank 5: be00000000800400", "severity": "uncorrected"},
    ),
    (  # UC clear: corrected
        "mce: [Hardware Error]: CPU 2: Machine Check: 0 Bank 7: 8c00004000010090",
        MACHINE_CHECK,
        {"severity": "corrected"},
    ),
    (  # an exception is uncorrected whatever its bank says
        "mce: [Hardware Error]: CPU 1: Machine Check Exception: 5 Bank 4: 8000000000000000",
        MACHINE_CHECK,
        {"severity": "uncorrected"},
    ),
    ("{1}[Hardware Error]: event severity: corrected", MACHINE_CHECK, {"severity": "corrected"}),
    ("{2}[Hardware Error]: event severity: fatal", MACHINE_CHECK, {"severity": "uncorrected"}),
    ("{3}[Hardware Error]: event severity: recoverable", MACHINE_CHECK, {"severity": "uncorrected"}),
    ("[Hardware Error]: Corrected error, no action required.", MACHINE_CHECK, {"severity": "corrected"}),
    (
        "EDAC MC0: 1 CE memory read error on CPU_SrcID#0_Ha#0_Chan#1_DIMM#0 (channel:1 slot:0 page:0x12345)",
        MEMORY_CORRECTED,
        {"controller": "MC0", "count": 1},
    ),
    (
        "EDAC MC1: 2 UE memory scrubbing error on CPU_SrcID#1_Ha#0_Chan#0_DIMM#0",
        MEMORY_UNCORRECTED,
        {"controller": "MC1", "count": 2},
    ),
    (
        "Out of memory: Killed process 1234 (python) total-vm:1048576kB, anon-rss:524288kB, file-rss:0kB,"
        " shmem-rss:0kB, UID:0 pgtables:2048kB oom_score_adj:0",
        OOM_KILL,
        {"pid": 1234, "task": "python", "scope": "system"},
    ),
    (
        "Memory cgroup out of memory: Killed process 99 (vllm) total-vm:812kB, anon-rss:0kB",
        OOM_KILL,
        {"pid": 99, "task": "vllm", "scope": "cgroup"},
    ),
    (
        "oom-kill:constraint=CONSTRAINT_NONE,nodemask=(null),cpuset=/,mems_allowed=0,global_oom,"
        "task_memcg=/system.slice/docker-abc.scope,task=python,pid=1234,uid=0",
        OOM_KILL,
        {"scope": "system", "task": "python", "pid": 1234, "cgroup": "/system.slice/docker-abc.scope"},
    ),
    (
        "oom-kill:constraint=CONSTRAINT_MEMCG,nodemask=(null),cpuset=docker-1.scope,mems_allowed=0,"
        "oom_memcg=/system.slice/docker-1.scope,task_memcg=/system.slice/docker-1.scope,task=ray,pid=77,uid=0",
        OOM_KILL,
        {"scope": "cgroup", "task": "ray", "pid": 77},
    ),
]


@pytest.mark.parametrize(("line", "kind", "detail"), LINES)
def test_each_kernel_line_form_is_its_signal(line, kind, detail):
    signal = classify(line)
    assert signal is not None and signal.kind == kind, signal
    assert detail.items() <= signal.detail.items(), signal.detail


@pytest.mark.parametrize(
    "line",
    [
        "",
        "usb 1-1: new high-speed USB device number 2 using xhci_hcd",
        "NVRM: Xid (PCI:0000:17:00): 79, pid=1234, GPU has fallen off the bus.",
        "EXT4-fs (sda1): mounted filesystem with ordered data mode",
        "INFO: task X:abc blocked for more than 120 seconds.",  # no pid
        "task blocked for more than 120 seconds",
        "EDAC MC0: HANDLING MCE MEMORY ERROR",
        # a machine check record's other lines: its severity line counted it
        "{1}[Hardware Error]: Hardware error from APEI Generic Hardware Error Source: 0",
        "mce: [Hardware Error]: RIP !INEXACT! 10:<ffffffff8100f2c0> {intel_idle+0x80/0xc0}",
        "mce: [Hardware Error]: TSC 8f1bc2bd5f4 ADDR 1fffd2000 MISC 908c000200040086",
        "mce: [Hardware Error]: Run the above through 'mcelog --ascii'",
    ],
)
def test_other_lines_carry_nothing(line):
    assert classify(line) is None


def test_a_hostile_line_is_cut_before_matching_and_its_fields_are_bounded():
    for line in (
        "INFO: task " + "a:" * 200_000 + " blocked for more than 1 seconds.",
        "x" * 1_000_000,
        "[Hardware Error]: " + "\x00" * 10_000,
        "oom-kill:constraint=" + ",".join(f"k{i}=v" for i in range(50_000)) + ",task=" + "t" * 5000 + ",pid=1",
    ):
        signal = classify(line)
        assert signal is None or all(len(str(v)) <= 2 * MAX_FIELD for v in signal.detail.values()), signal
    # only the first MAX_LINE characters are read: a signal past them is not seen
    assert classify(" " * MAX_LINE + "INFO: task X:1 blocked for more than 120 seconds.") is None
    long_task = classify("INFO: task " + "t" * 500 + ":12 blocked for more than 120 seconds.")
    assert long_task is None  # a name past the kernel's 16 bytes (and ours) is no task line
