"""The supervisor takes the free blocks of pymalloc's partly used pools before it forks
(pools.py): a worker's new small objects then go to pools of its own instead of into a page
of the supervisor's, which a write copies. Read back through sys._debugmallocstats, in a
fresh interpreter (the fill changes the process for good)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from faden_agent.supervisor.prefork import pools

CHILD = """
import json
from faden_agent.supervisor.prefork import pools
# bytes objects of 40, 100 and 300 bytes take blocks of 80, 144 and 336: keep every other one,
# so the freed ones are holes between live blocks of the same pools
kept = [bytes(n) for n in (40, 100, 300) for _ in range(3000)]
del kept[::2]
def planted():
    return {size: count for size, count in pools.free_blocks().items() if size in (80, 144, 336)}
before = planted()
taken = pools.fill_pool_holes()
print(json.dumps({"before": before, "taken": taken, "after": planted()}))
"""

# 2-tuples made at run time, every other one dropped: CPython keeps up to 2,000 in its tuple
# free list, whose next 2-tuples would take exactly those blocks, between live ones (on the
# supervisor's pages, in a worker)
FREE_LISTED = """
import json
from faden_agent.supervisor.prefork import pools
made = [(i, -i) for i in range(3000)]
dropped = {id(pair) for pair in made[::2]}
del made[::2]
pools.fill_pool_holes()
fresh = [(i, -i) for i in range(1500)]
print(json.dumps(sum(id(pair) in dropped for pair in fresh)))
"""


def test_the_free_blocks_between_live_ones_are_taken():
    out = subprocess.run([sys.executable, "-c", CHILD], capture_output=True, text=True, check=True, timeout=60)
    got = json.loads(out.stdout)
    before, after = got["before"], got["after"]
    assert sorted(before) == ["144", "336", "80"] and min(before.values()) >= 1000, got
    assert got["taken"] >= sum(before.values())
    # at most what a fresh pool opened by the fill itself has left (its untouched pages)
    assert all(after.get(size, 0) < count / 4 for size, count in before.items()), got


@pytest.mark.parametrize("size", [16, 32, 48, 336, 512])
def test_each_filler_takes_one_block_of_its_class(size):
    make = pools.filler(size)
    first, second = make(), make()
    assert first is not second and size - pools.ALIGNMENT < sys.getsizeof(first) <= size


def test_the_free_lists_are_emptied_before_the_fill():
    out = subprocess.run([sys.executable, "-c", FREE_LISTED], capture_output=True, text=True, check=True, timeout=60)
    # without the emptying all 1,500 blocks are taken again; with it only the few of the fill's
    # own tuples, dropped after it
    assert json.loads(out.stdout) < 20
