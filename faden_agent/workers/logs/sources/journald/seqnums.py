"""Journal entries gone before they were read, counted from the cursors' sequence numbers.

journald numbers every entry it writes (one counter per seqnum ID, across rotated files);
a jump between two entries read of one ID is that many entries vacuumed (or in a file this
reader may not open). Checked per block: first and last of a gapless block only.
"""

from __future__ import annotations

from faden_agent.workers.logs.entry import Entry

_IDS_KEPT = 64  # seqnum IDs remembered (one per journal lineage: a handful)


def seqnum(cursor: str) -> tuple[str, int] | None:
    """(seqnum ID, seqnum) of a cursor "s=<id>;i=<hex>;..."; None for anything else."""
    parts = cursor.split(";", 2)
    if len(parts) < 2 or not parts[0].startswith("s=") or not parts[1].startswith("i="):
        return None
    try:
        return parts[0], int(parts[1][2:18], 16)
    except ValueError:
        return None


class SeqnumGaps:
    def __init__(self, cursor: str | None):
        self.last: dict[str, int] = {}  # seqnum ID -> the last seqnum read of it
        if cursor and (start := seqnum(cursor)) is not None:
            self.last[start[0]] = start[1]

    def gap(self, entries: list[Entry]) -> int:
        """Entries missing between those read before and these (in order); 0 when none."""
        first, last = seqnum(entries[0].position), seqnum(entries[-1].position)
        if (
            first is not None
            and last is not None
            and first[0] == last[0]
            and self.last.get(first[0], first[1] - 1) == first[1] - 1
            and last[1] - first[1] == len(entries) - 1
        ):
            self.last[last[0]] = last[1]  # the usual block: one lineage, no jump
            return 0
        missing = 0
        for entry in entries:
            current = seqnum(entry.position)
            if current is None:
                continue
            before = self.last.get(current[0])
            if before is not None and current[1] > before + 1:
                missing += current[1] - before - 1
            if before is None and len(self.last) >= _IDS_KEPT:
                self.last.clear()
            self.last[current[0]] = max(current[1], before or 0)
        return missing
