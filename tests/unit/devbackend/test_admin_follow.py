"""The follow view's arithmetic and wording (faden_agent/devbackend/follow.py); the whole
thing against a real agent and registry is tests/integration/devbackend/test_admin_follow.py."""

from __future__ import annotations

import io

from rich.console import Console

from faden_agent.devbackend.follow import TimelineView

MB = 1_000_000


def plain_view() -> tuple[TimelineView, io.StringIO]:
    out = io.StringIO()
    return TimelineView(Console(file=out, force_terminal=False, width=200)), out


def record(state: str, ts: float, **fields):
    return {"command_id": "c1", "state": state, "ts": ts, "received_at": ts + 0.01, **fields}


def test_rate_and_eta_come_from_the_records_own_times():
    """Shown from history at once, a pull still shows the rate it had (50 MB/s), not the poll's."""
    view, out = plain_view()
    pull = {"phase": "pull", "image": "r/x:1", "bytes_total": 200 * MB, "layers": 2}
    timeline = [
        record("received", 100.0, kind="image.pull", seq=1),
        record("started", 100.2, attempt=1),
        record("progress", 101.0, bytes_done=0, **pull),
        record("progress", 102.0, bytes_done=50 * MB, **pull),
        record("progress", 103.0, bytes_done=100 * MB, **pull),
    ]
    assert view.show(timeline) is None
    lines = out.getvalue().splitlines()
    assert [line.split()[2] for line in lines] == ["received", "started", "progress", "progress", "progress"]
    assert "+0.0s" in lines[0] and "+3.0s" in lines[-1]
    assert "pull r/x:1   50.0 %  100.0 MB / 200.0 MB  50.0 MB/s  ETA 2s" in lines[-1], lines[-1]
    assert view.show(timeline) is None and out.getvalue().count("\n") == 5  # nothing twice


def test_the_outcome_comes_last_with_reason_and_message():
    view, out = plain_view()
    failed = record("failed", 5.0, reason="registry_unreachable", message="pulling x: cannot reach the registry")
    assert view.show([record("received", 4.0, kind="image.pull"), failed]) == failed
    assert "failed" not in out.getvalue()  # printed by close(), below any bars
    view.close()
    assert (
        out.getvalue()
        .splitlines()[-1]
        .endswith("failed     registry_unreachable: pulling x: cannot reach the registry")
    )


def test_a_result_is_shown_flat_and_short():
    view, out = plain_view()
    done = record(
        "succeeded",
        1.0,
        reason="ok",
        message="pulled x",
        result={"image": "x", "image_id": "sha256:" + "a" * 64, "digests": ["d"]},
    )
    view.show([done])
    view.close()
    line = out.getvalue().strip()
    assert "ok: pulled x  (image=x image_id=sha256:" in line and "digests" not in line and "a" * 64 not in line
