"""The supervisor takes the C heap's small free chunks before it forks (heap.py): a
worker's first mallocs then go to fresh pages instead of into the supervisor's, which a
write copies. Read back through glibc's own malloc_info, in a fresh interpreter."""

from __future__ import annotations

import subprocess
import sys

import pytest

CHILD = """
from faden_agent.supervisor.prefork import heap
libc = heap._libc()
# Objects over 512 bytes come from malloc: keep every other one, so the freed ones are holes
# between live chunks (not merged into the top of the heap).
kept = [bytes(600 + (i % 8) * 48) for i in range(4000)]
del kept[::2]
def planted():  # holes of the freed objects' sizes: the small churn of the reading itself is left out
    return sum(count for size, count in heap.small_holes(libc).items() if 600 <= size <= 1024)
before = planted()
taken = heap.fill_heap_holes()
after = planted()
print(before, taken, after, heap.release_free_heap())
"""


def test_fill_heap_holes_takes_the_small_free_chunks_between_live_ones():
    out = subprocess.run([sys.executable, "-c", CHILD], capture_output=True, text=True, check=True, timeout=60)
    before, taken, after, trimmed = out.stdout.split()
    before, taken, after = int(before), int(taken), int(after)
    assert before > 1000, out.stdout  # the 2000 freed objects' chunks, some merged with neighbours
    assert taken >= before
    assert after < before / 10, out.stdout
    assert trimmed == "True"


OUT_OF_DESCRIPTORS = """
import os, sys
from faden_agent.supervisor.prefork import heap, pools
held = []
try:
    while True:
        held.append(os.open("/dev/null", os.O_RDONLY))
except OSError:
    pass
print({"heap": heap.fill_heap_holes, "pools": pools.fill_pool_holes}[sys.argv[1]]())
"""


@pytest.mark.parametrize("trick", ["heap", "pools"])
def test_out_of_descriptors_the_fill_is_skipped_not_a_failure(trick):
    # Each reads its allocator's state through a memory file: it must never be why a start fails.
    out = subprocess.run(
        [sys.executable, "-c", OUT_OF_DESCRIPTORS, trick], capture_output=True, text=True, check=True, timeout=60
    )
    assert out.stdout.split() == ["0"], out.stderr
