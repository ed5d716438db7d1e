"""Journal entries lost before they were read, counted from the cursors' sequence numbers within
one lineage (sources/journald/seqnums.py)."""

from __future__ import annotations

from faden_agent.workers.logs.entry import Entry


def test_seqnum_gaps_count_only_jumps_within_one_lineage():
    from faden_agent.workers.logs.sources.journald.seqnums import SeqnumGaps

    def cursors(lineage: str, *numbers: int) -> list[Entry]:
        return [Entry((), 1, "x", None, "journal", f"s={lineage};i={n:x};b=0;m=1;t=2;x=3") for n in numbers]

    gaps = SeqnumGaps("s=aa;i=9;b=0;m=1;t=2;x=3")  # the stored cursor: entry 9 was read
    assert gaps.gap(cursors("aa", 10, 11, 12)) == 0
    assert gaps.gap(cursors("aa", 20, 21)) == 7  # 13..19 gone before they were read
    assert gaps.gap(cursors("bb", 1, 2) + cursors("aa", 22) + cursors("bb", 5)) == 2  # interleaved lineages
    assert gaps.gap(cursors("aa", 23) + [Entry((), 1, "x", None, "journal", "not a cursor")]) == 0
    assert SeqnumGaps(None).gap(cursors("cc", 100, 101)) == 0  # no earlier read: nothing to compare
