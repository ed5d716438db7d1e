"""The lean heartbeat's change key (workers/stream/heartbeat.py): states change it, numbers
(ages, sizes, CPU, counters, times) do not; restarts and pids are states."""

from __future__ import annotations

from faden_agent.workers.stream.heartbeat import change_key


def detail(**worker_changes):
    worker = {
        "name": "logs",
        "state": "RUNNING",
        "pid": 10,
        "uptime_s": 5.0,
        "restarts": 0,
        "last_exit": None,
        "heartbeat_age_s": 0.3,
        "rss_bytes": 20_000_000,
        "cpu_percent": 0.1,
        "status": {"lines": 5, "sources": {"journal": {"state": "following", "read": 3}}},
    }
    worker.update(worker_changes)
    return {
        "version": "1",
        "capabilities": ["docker"],
        "supervisor": {"pid": 1, "uptime_s": 5.0},
        "workers": [worker],
        "connection": {"state": "connected", "last_contact_at": 5.0},
        "disk_full": None,
    }


def test_numbers_do_not_change_the_key():
    quiet = detail(
        uptime_s=99.0,
        heartbeat_age_s=0.9,
        rss_bytes=1,
        cpu_percent=7.5,
        status={"lines": 500, "sources": {"journal": {"state": "following", "read": 300}}},
    )
    quiet["connection"]["last_contact_at"] = 99.0
    quiet["supervisor"]["uptime_s"] = 99.0
    assert change_key(quiet) == change_key(detail())


def test_states_change_the_key():
    before = change_key(detail())
    assert change_key(detail(state="BACKOFF", pid=None)) != before
    assert change_key(detail(restarts=1)) != before
    assert change_key(detail(pid=11)) != before
    assert change_key(detail(last_exit="signal SIGKILL")) != before
    assert change_key(detail(status={"lines": 5, "sources": {"journal": {"state": "waiting", "read": 3}}})) != before
    assert change_key({**detail(), "disk_full": {"path": "/x", "error": "ENOSPC"}}) != before
    assert change_key({**detail(), "connection": {"state": "maintenance"}}) != before
    assert change_key({**detail(), "supervisor": {"pid": 2}}) != before


def test_detail_changes_names_what_made_a_beat_carry_the_detail():
    from faden_agent.workers.stream.heartbeat import detail_changes

    before = {
        "workers": [
            {"name": "executor", "state": "RUNNING", "pid": 10, "status": {"docker": "ok", "running": 0}},
            {"name": "logs", "state": "STARTING", "pid": 11, "status": None},
        ],
        "connection": {"state": "connected", "last_contact_at": 1.0},
        "uptime_s": 5,
    }
    after = {
        "workers": [
            {"name": "executor", "state": "RUNNING", "pid": 10, "status": {"docker": "down", "running": 3}},
            {"name": "logs", "state": "RUNNING", "pid": 11, "status": {"target": "http://loki"}},
        ],
        "connection": {"state": "backoff", "last_contact_at": 9.0},
        "uptime_s": 50,
    }
    assert detail_changes(before, after) == [
        "connection",
        "executor.status.docker",
        "logs.state",
        "logs.status",
        "logs.status.target",
    ]
    unchanged = detail_changes(before, {**before, "uptime_s": 99})
    assert unchanged == ["nothing: a beat not sent before it, or the full refresh"]
    assert detail_changes(None, after) == ["(no detail before it)"]
