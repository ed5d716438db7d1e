"""The supervisor's one door for worker state changes: every transition it makes is in the
table, and one it does not allow is refused (a bug said loudly, as supervisord asserts)."""

from __future__ import annotations

import pytest

from faden_agent.supervisor.states import ALLOWED, StateError, WorkerProcess, WorkerState

S = WorkerState


def test_a_hung_worker_is_killed_and_restarted_through_the_door():
    worker = WorkerProcess("logs", "x:Y")
    for state in (S.STARTING, S.RUNNING, S.HUNG, S.BACKOFF, S.STARTING, S.RUNNING, S.STOPPING, S.EXITED):
        worker.change_state(state)
    assert worker.state == S.EXITED


@pytest.mark.parametrize(("start", "to"), [(S.STOPPED, S.RUNNING), (S.HUNG, S.RUNNING), (S.EXITED, S.BACKOFF)])
def test_a_transition_outside_the_table_is_refused(start, to):
    worker = WorkerProcess("logs", "x:Y", state=start)
    with pytest.raises(StateError, match=f"{start} -> {to}"):
        worker.change_state(to)
    assert worker.state == start


def test_every_state_has_its_row():
    assert set(ALLOWED) == set(WorkerState)
