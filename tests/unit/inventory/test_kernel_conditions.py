"""The node conditions the kernel's lines raise (conditions/kernel.py) and their rules
(rules.kernel_lines: each held by its setting, until the next boot or for a time), the fabric
manager's rule, and the hold settings' parser."""

from __future__ import annotations

import pytest

from faden_agent.config import ConfigError, load_config
from faden_agent.protocol import conditions as names
from faden_agent.workers.inventory.conditions import evaluate, rules
from faden_agent.workers.inventory.conditions.kernel import KernelConditions, KernelView, restored
from faden_agent.workers.inventory.conditions.tracker import Signal
from faden_agent.workers.inventory.kernel.lines import JOURNALD, KernelLine

BOOT = "a" * 32
HOLDS = {
    names.KERNEL_HUNG_TASK: None,
    names.KERNEL_LOCKUP: 3600.0,
    names.HARDWARE_ERROR_UNCORRECTED: None,
    names.HARDWARE_ERROR_CORRECTED: 3600.0,
    names.OOM_KILL: 600.0,
}
HUNG = "INFO: task python3:4242 blocked for more than 120 seconds."
SYSTEM_OOM = "Out of memory: Killed process 1234 (vllm) total-vm:1048576kB, anon-rss:524288kB, file-rss:0kB"
CGROUP_OOM = "Memory cgroup out of memory: Killed process 9306 (tail) total-vm:34288kB, anon-rss:32128kB"


class Clock:
    def __init__(self, now: float = 10_000.0):
        self.now = now

    def __call__(self) -> float:
        return self.now


def line(text: str, at: float, boot: str | None = BOOT) -> KernelLine:
    return KernelLine(text, at, boot, JOURNALD, 3)


def consumer(clock: Clock, kept=None, changed=None) -> KernelConditions:
    def on_change() -> None:
        if changed is not None:
            changed.append(clock.now)

    return KernelConditions(BOOT, HOLDS, on_change, kept, clock)


def signals(taker: KernelConditions, now: float, problem: str | None = None, memory: dict | None = None):
    return rules.kernel_lines(taker.view(problem), HOLDS, {} if memory is None else memory, now)


def test_each_kernel_condition_from_its_line_with_the_reason_that_names_the_culprit():
    clock = Clock()
    taker = consumer(clock)
    for text in (
        HUNG,
        "watchdog: BUG: soft lockup - CPU#3 stuck for 22s! [python3:4567]",
        "mce: [Hardware Error]: CPU 1: Machine Check Exception: 5 Bank 4: b200000000070f0f",
        "EDAC MC0: 1 CE memory read error on CPU_SrcID#0_Ha#0_Chan#1_DIMM#0 (channel:1 slot:0 page:0x12345)",
        SYSTEM_OOM,
    ):
        taker.take(line(text, clock.now - 5))
    found = signals(taker, clock.now)
    assert {name: s.reason for name, s in found.items() if s.active} == {
        names.KERNEL_HUNG_TASK: "task python3:4242 blocked for more than 120 s",
        names.KERNEL_LOCKUP: "soft lockup on CPU 3 (python3:4567)",
        names.HARDWARE_ERROR_UNCORRECTED: "machine check, uncorrected: CPU 1: Machine Check Exception: 5 Bank 4:"
        " b200000000070f0f",
        # the line's fields are cut at 64 characters
        names.HARDWARE_ERROR_CORRECTED: "EDAC MC0: 1 corrected error(s): memory read error on"
        " CPU_SrcID#0_Ha#0_Chan#1_DIMM#0 (channel:1 s",
        names.OOM_KILL: "out of memory: the kernel killed vllm (pid 1234)",
    }
    assert (taker.read, taker.cgroup_oom_kills) == (5, 0)


def test_a_hold_in_seconds_ends_by_itself_a_boot_hold_only_with_a_new_boot():
    clock = Clock()
    taker = consumer(clock)
    taker.take(line(HUNG, clock.now))
    taker.take(line(SYSTEM_OOM, clock.now))
    memory: dict = {}
    assert signals(taker, clock.now + 599, memory=memory)[names.OOM_KILL].active is True
    assert set(memory) == {names.KERNEL_HUNG_TASK, names.OOM_KILL}  # what holds is kept
    later = signals(taker, clock.now + 600, memory=memory)
    assert later[names.OOM_KILL] == Signal(False)
    assert later[names.KERNEL_HUNG_TASK].active is True  # a day on, the same boot: still held
    assert signals(taker, clock.now + 86400)[names.KERNEL_HUNG_TASK].active is True
    assert set(memory) == {names.KERNEL_HUNG_TASK}
    # the next boot: the worker starts with that boot's id; the kept line of the last one holds nothing
    after_reboot = KernelConditions("b" * 32, HOLDS, lambda: None, memory, clock)
    found = rules.kernel_lines(after_reboot.view(None), HOLDS, memory, clock.now + 86400)
    assert found[names.KERNEL_HUNG_TASK] == Signal(False) and memory == {}


def test_a_restart_holds_what_the_kept_lines_hold():
    clock = Clock()
    taker = consumer(clock)
    taker.take(line(HUNG, clock.now))
    memory: dict = {}
    signals(taker, clock.now, memory=memory)
    again = consumer(clock, kept=memory)
    assert signals(again, clock.now + 60)[names.KERNEL_HUNG_TASK] == Signal(
        True, "task python3:4242 blocked for more than 120 s"
    )


def test_a_cgroups_own_oom_kill_is_its_containers_no_node_condition():
    clock = Clock()
    changed: list = []
    taker = consumer(clock, changed=changed)
    taker.take(line(CGROUP_OOM, clock.now))
    taker.take(
        line(
            "oom-kill:constraint=CONSTRAINT_MEMCG,nodemask=(null),cpuset=docker-1.scope,mems_allowed=0,"
            "oom_memcg=/system.slice/docker-1.scope,task_memcg=/system.slice/docker-1.scope,task=ray,pid=77,uid=0",
            clock.now,
        )
    )
    assert signals(taker, clock.now)[names.OOM_KILL] == Signal(False)
    assert (taker.read, taker.cgroup_oom_kills) == (0, 2) and changed == []


def test_an_old_line_asks_for_no_round_and_never_replaces_a_newer_one():
    clock = Clock()
    changed: list = []
    taker = consumer(clock, changed=changed)
    taker.take(line(SYSTEM_OOM, clock.now - 7200))  # read from the boot's start: held no more
    assert changed == [] and signals(taker, clock.now)[names.OOM_KILL] == Signal(False)
    taker.take(line(SYSTEM_OOM.replace("1234 (vllm)", "55 (ray)"), clock.now - 10))
    assert len(changed) == 1
    taker.take(line(SYSTEM_OOM, clock.now - 20))  # an older one read again after a lost position
    assert signals(taker, clock.now)[names.OOM_KILL].reason == "out of memory: the kernel killed ray (pid 55)"
    taker.take(line(HUNG, clock.now + 3600))  # a time ahead of the clock counts as now
    assert taker.view(None).seen[names.KERNEL_HUNG_TASK]["at"] == clock.now


def test_without_a_kernel_log_unknown_unless_a_kept_line_holds_it():
    clock = Clock()
    taker = consumer(clock)
    taker.take(line(HUNG, clock.now))
    found = signals(taker, clock.now, problem="no kernel log: journalctl not found; /dev/kmsg: Permission denied")
    assert found[names.KERNEL_HUNG_TASK].active is True
    assert found[names.OOM_KILL] == Signal(
        None, "no kernel log: journalctl not found; /dev/kmsg: Permission denied: the kernel's lines not seen"
    )


def test_kept_lines_of_another_boot_or_malformed_are_dropped():
    kept = {
        names.KERNEL_HUNG_TASK: {"at": 5.0, "boot": BOOT, "reason": "task x:1 blocked for more than 120 s"},
        names.OOM_KILL: {"at": 5.0, "boot": "b" * 32, "reason": "of the last boot"},
        names.KERNEL_LOCKUP: {"at": float("nan"), "boot": BOOT, "reason": "x"},
        names.HARDWARE_ERROR_CORRECTED: {"at": True, "boot": BOOT, "reason": "x"},
        names.HARDWARE_ERROR_UNCORRECTED: {"at": 5, "boot": BOOT, "reason": ["not", "text"]},
        "no_such_condition": {"at": 5.0, "boot": BOOT, "reason": "x"},
    }
    assert restored(kept, BOOT) == {names.KERNEL_HUNG_TASK: kept[names.KERNEL_HUNG_TASK]}
    assert restored("junk", BOOT) == {} and restored(None, BOOT) == {}


def test_the_rules_leave_the_kernel_conditions_out_where_the_lines_are_not_read(tmp_path):
    from faden_agent.workers.inventory.conditions.store import ConditionStore
    from faden_agent.workers.inventory.conditions.tracker import NodeConditions

    config = load_config({"FADEN_NODE_AGENT_STATE_PATH": str(tmp_path / "state.json")})
    conditions = NodeConditions(ConditionStore(tmp_path))
    sections = {"disks": [], "gpu": None, "topology": {}}
    without = evaluate.signals(config, sections, None, conditions, 100.0)
    assert not set(names.KERNEL_CONDITIONS) & set(without)
    view = KernelView({}, BOOT, None)
    within = evaluate.signals(config, sections, None, conditions, 100.0, view)
    assert {name: within[name] for name in names.KERNEL_CONDITIONS} == dict.fromkeys(
        names.KERNEL_CONDITIONS, Signal(False)
    )


def test_the_fabric_manager_where_the_gpus_have_a_fabric_only():
    assert rules.fabric_manager(None) is None
    assert rules.fabric_manager({"devices": [{"index": 0}]}) is None  # no NVSwitch fabric: no fabric manager
    running = {"active": True, "state": "active (running)", "version": "550.54.15", "driver_version": "550.54.15"}
    assert rules.fabric_manager({"fabric_manager": running}) == Signal(False)
    stopped = {**running, "active": False, "state": "inactive (dead)"}
    assert rules.fabric_manager({"fabric_manager": stopped}) == Signal(
        True, "not running (nvidia-fabricmanager: inactive (dead))"
    )
    unknown = {**running, "active": None, "state": "systemctl: no answer within 5 s"}
    assert rules.fabric_manager({"fabric_manager": unknown}) == Signal(
        None, "fabric manager state unknown: systemctl: no answer within 5 s"
    )


@pytest.mark.parametrize(("raw", "seconds"), [("boot", None), ("BOOT", None), ("5m", 300.0), ("90", 90.0)])
def test_a_hold_setting_is_boot_or_a_duration(tmp_path, raw, seconds):
    env = {"FADEN_NODE_AGENT_STATE_PATH": str(tmp_path / "state.json"), "FADEN_NODE_AGENT_OOM_KILL_HOLD_SEC": raw}
    assert load_config(env).oom_kill_hold_sec == seconds


@pytest.mark.parametrize("raw", ["0", "-1", "forever", "nan"])
def test_a_bad_hold_setting_names_the_variable(tmp_path, raw):
    env = {"FADEN_NODE_AGENT_STATE_PATH": str(tmp_path / "state.json"), "FADEN_NODE_AGENT_KERNEL_LOCKUP_HOLD_SEC": raw}
    with pytest.raises(ConfigError, match="FADEN_NODE_AGENT_KERNEL_LOCKUP_HOLD_SEC.*boot or a positive number"):
        load_config(env)


def test_doctor_has_a_hint_for_every_condition():
    from faden_agent.cli.doctor_conditions import HINTS

    assert set(HINTS) == set(names.NODE_CONDITIONS)
