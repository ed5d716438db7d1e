"""The heartbeat's grid (workers/stream/heartbeat.py, next_beat): beats stay on
start + n * interval; a send that ran past the next point is followed at once by the latest
point due, and an outage's points are skipped, not sent in a burst."""

from __future__ import annotations

from faden_agent.workers.stream.heartbeat import next_beat


def test_an_on_time_send_waits_for_the_next_point():
    assert next_beat(0, 0.004, 15.0) == 1
    assert next_beat(7, 7 * 15.0 + 14.9, 15.0) == 8


def test_a_send_that_ran_past_the_next_point_is_followed_at_once_by_that_point():
    # beat 7 took 1.2 intervals: beat 8 is due already and goes now (late), not beat 9
    assert next_beat(7, 8.2, 1.0) == 8


def test_an_outage_sends_only_the_latest_point_due():
    assert next_beat(3, 33.5, 1.0) == 33  # points 4..32 are skipped; 33 goes at once
    assert next_beat(33, 33.6, 1.0) == 34  # then the grid again


def test_a_wait_that_returned_a_little_early_does_not_repeat_a_beat():
    assert next_beat(5, 5 * 2.0 - 1e-6, 2.0) == 6
