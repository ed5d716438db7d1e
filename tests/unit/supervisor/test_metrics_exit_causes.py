"""A worker's exit cause as a metric label: a bounded set, named by the supervisor from the wait
status, never read from a sentence."""

from __future__ import annotations

import pytest

from faden_agent.supervisor.metrics.families import exit_cause


@pytest.mark.parametrize(
    "text, cause",
    [
        ("none", "none"),
        ("signal_SIGKILL", "signal_SIGKILL"),
        ("thread_died", "thread_died"),
        ("hung", "hung"),
        ("exit_1", "exit_1"),
        ("exit_1000000", "other"),
        ("signal_" + "A" * 500, "other"),
        ("killed: hung (signal SIGKILL)", "other"),  # a sentence is never read for a label
        (None, "other"),
    ],
)
def test_exit_causes_are_a_bounded_set(text, cause):
    assert exit_cause(text) == cause


def test_the_supervisor_names_each_exit_cause_from_the_status_not_its_text():
    import signal

    from faden_agent.supervisor.arbiter import exit_cause as cause_of

    killed = signal.SIGKILL  # a wait status of a process killed by SIGKILL is the signal number
    assert cause_of(killed, hung=True, thread_died=False) == "hung"
    assert cause_of(3 << 8, hung=False, thread_died=True) == "thread_died"
    assert cause_of(killed, hung=False, thread_died=False) == "signal_SIGKILL"
    assert cause_of(3 << 8, hung=False, thread_died=False) == "exit_3"
