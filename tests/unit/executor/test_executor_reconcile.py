"""What reconciliation reports, from two `docker inspect` snapshots (executor/reconcile.py)."""

from __future__ import annotations

from types import SimpleNamespace

from faden_agent.workers.executor.reconcile import Seen, docker_time_ns, missed, reconcile, snapshot


def inspect(
    started: str,
    finished: str,
    exit_code: int = 0,
    oom: bool = False,
    restarts: int = 0,
    status: str = "exited",
    health: str | None = None,
) -> dict:
    state = {"Status": status, "StartedAt": started, "FinishedAt": finished, "ExitCode": exit_code, "OOMKilled": oom}
    if health:
        state["Health"] = {"Status": health}
    return {
        "Name": "/c1",
        "RestartCount": restarts,
        "State": state,
        "Config": {"Image": "img", "Labels": {"io.fadenstack.command-id": "cmd-1"}},
    }


class Meta:
    def __init__(self):
        self.values = {}

    def get_meta(self, key, default=None):
        return self.values.get(key, default)

    def set_meta(self, key, value):
        self.values[key] = value


T0, T1, T2 = "2026-01-01T00:00:00.1Z", "2026-01-01T00:00:05.123456789Z", "2026-01-01T00:00:09Z"


def test_a_missed_oom_death_and_restarts_are_reported_with_dockers_times():
    before = snapshot(inspect(T0, "0001-01-01T00:00:00Z", status="running"))
    now = snapshot(inspect(T2, T1, exit_code=137, oom=True, restarts=3, status="running"))
    found = {action: (key, extra) for action, key, extra in missed(before, now, {})}
    assert set(found) == {"restart", "oom", "die", "start"}
    assert found["restart"][1]["restarts"] == 3 and found["restart"][0] == "3"
    assert found["die"][1]["exit_code"] == 137 and found["die"][1]["oom_killed"] is True
    assert found["die"][1]["time_ns"] == docker_time_ns(T1) == 1767225605123456789
    assert found["start"][1]["started_at"] == T2


def test_what_the_replay_reported_is_not_reported_again():
    before = snapshot(inspect(T0, "0001-01-01T00:00:00Z", status="running"))
    now = snapshot(inspect(T0, T1, exit_code=3))
    assert [a for a, _, _ in missed(before, now, {})] == ["die"]
    assert missed(before, now, {"die": [docker_time_ns(T1) + 1000]}) == []
    assert [a for a, _, _ in missed(before, now, {"die": [docker_time_ns(T0)]})] == ["die"]  # an earlier death


def test_no_change_nothing_first_sight_nothing_gone_destroy():
    meta, reported = Meta(), []
    seen = Seen(meta)
    container = SimpleNamespace(id="abc", attrs=inspect(T0, T1, exit_code=1))
    put = lambda record_id, data: reported.append((record_id, data))  # noqa: E731
    assert reconcile([container], seen, put, {}) == 0  # first sight: a snapshot, no event
    assert reconcile([container], Seen(meta), put, {}) == 0  # unchanged (and loaded from the meta table)
    assert reconcile([], Seen(meta), put, {}) == 1
    assert reported[0][0] == "ev:abc:destroy:reconciled:gone"
    assert reported[0][1]["reconciled"] is True and reported[0][1]["name"] == "c1"
    assert reported[0][1]["command_id"] == "cmd-1"
