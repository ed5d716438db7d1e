"""The supervisor fills the allocator's free blocks before it forks (issue 16): a child's new
objects then go to pools of its own instead of into inherited pages, which a write copies."""

from __future__ import annotations

import subprocess
import sys

CHILD = """
import sys
from faden_agent.supervisor.prefork.preload import fill_pools, free_blocks_by_size
holes = [str(i) * 3 for i in range(20000)]
del holes[::2]  # free blocks in pools in use
before = sum(free_blocks_by_size().values())
filled = fill_pools()
after = sum(free_blocks_by_size().values())
print(before, filled, after)
"""


def test_fill_pools_leaves_almost_no_free_block_in_pools_in_use():
    # A fresh interpreter: the test runner's own heap is not the supervisor's.
    out = subprocess.run([sys.executable, "-c", CHILD], capture_output=True, text=True, check=True, timeout=60)
    before, filled, after = map(int, out.stdout.split())
    assert before > 5_000 and filled >= before * 0.9
    assert after < before / 10, (before, filled, after)
