"""A gone Ray log file's position: a loss only when its file rotated away unread."""

from __future__ import annotations

import os

from faden_agent.workers.logs.positions import Positions
from faden_agent.workers.logs.sources.ray.fileends import FileEnds, position_key


def _ends(tmp_path):
    positions = Positions(tmp_path / "state")
    (tmp_path / "state").mkdir(exist_ok=True)
    return positions, FileEnds(positions)


def _gone_files(tmp_path, *names: str) -> list[tuple[str, str]]:
    """Position keys and paths of files that existed in tmp_path/logs (all at once: no
    inode shared) and are gone."""
    logs = tmp_path / "logs"
    logs.mkdir(exist_ok=True)
    found = []
    for name in names:
        (logs / name).write_text("a\n")
        st = (logs / name).stat()
        found.append((position_key((st.st_dev, st.st_ino)), str(logs / name)))
    for name in names:
        (logs / name).unlink()
    return found


def test_a_gone_file_short_of_its_end_is_lost_and_at_its_end_is_not(tmp_path):
    positions, ends = _ends(tmp_path)
    (short, short_path), (done, done_path), (live, live_path) = _gone_files(tmp_path, "s.log", "d.log", "l.log")
    positions.advance({short: {"offset": 10, "ts": 1, "path": short_path}})
    positions.advance({done: {"offset": 20, "ts": 1, "path": done_path}})
    positions.advance({live: {"offset": 20, "ts": 1, "path": live_path}})
    ends.record(short, 30)
    ends.record(done, 20)
    # short of its end; at it; no end known (it was live when last seen): at least one line
    assert [ends.gone(short), ends.gone(done), ends.gone(live)] == [True, False, True]
    assert positions.keys("file") == []  # every position and end forgotten


def test_a_file_whose_directory_went_or_that_is_still_there_is_no_rotation(tmp_path):
    positions, ends = _ends(tmp_path)
    [(tree_gone, path)] = _gone_files(tmp_path, "x.log")
    os.rmdir(tmp_path / "logs")
    positions.advance({tree_gone: {"offset": 0, "ts": 1, "path": path}})
    still = tmp_path / "still.log"
    still.write_text("b\n")
    st = still.stat()
    kept = position_key((st.st_dev, st.st_ino))
    positions.advance({kept: {"offset": 0, "ts": 1, "path": str(still)}})
    assert [ends.gone(tree_gone), ends.gone(kept)] == [False, False]


def test_a_complete_file_is_forgotten_an_incomplete_one_kept_and_orphan_ends_go(tmp_path):
    positions, ends = _ends(tmp_path)
    positions.advance({"file:1:2": {"offset": 5, "ts": 1, "path": "/x"}, "file:1:3": {"offset": 4, "path": "/y"}})
    ends.record("file:1:2", 5)
    ends.record("file:1:3", 9)
    ends.record("file:1:4", 9)  # its position went elsewhere
    ends.forget_complete("file:1:2")
    ends.forget_complete("file:1:3")
    ends.forget_orphans()
    assert sorted(positions.keys("file")) == ["file-end:1:3", "file:1:3"]
