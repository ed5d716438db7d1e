"""The supervisor hands its start-up's library pages back before it forks (coldpages.py):
a read-only file mapping that only this process maps loses its resident pages, reads the
same bytes afterwards, and writable or anonymous memory keeps what it holds. Real mappings
of a real file, read back through /proc/self/smaps."""

from __future__ import annotations

import mmap
import os

from faden_agent.common.coldpages import page_out_cold_libraries, read_only_file_mappings

SIZE = 4 << 20


def resident_kib(address: int) -> int:
    """Rss of the mapping that starts at `address`, from /proc/self/smaps."""
    inside = False
    with open("/proc/self/smaps") as smaps:
        for line in smaps:
            first = line.split()[0]
            if "-" in first and not first.endswith(":"):
                inside = int(first.split("-")[0], 16) == address
            elif inside and first == "Rss:":
                return int(line.split()[1])
    raise AssertionError(f"no mapping at {address:#x}")


def test_a_read_only_file_mapping_is_handed_back_and_reads_the_same(tmp_path):
    path = tmp_path / "library.so"
    content = os.urandom(SIZE)
    path.write_bytes(content)
    with open(path, "rb") as f:
        code = mmap.mmap(f.fileno(), SIZE, flags=mmap.MAP_PRIVATE, prot=mmap.PROT_READ)
    data = mmap.mmap(-1, SIZE)  # anonymous, written: relocated data, the Python heap
    data.write(content)
    try:
        assert code[:] == content  # every page touched: resident
        code_at = _start(path)
        assert any(start == code_at for start, _ in read_only_file_mappings(open("/proc/self/maps").read()))
        assert resident_kib(code_at) >= SIZE // 1024 * 0.9
        advised = page_out_cold_libraries()
        assert advised >= SIZE
        assert resident_kib(code_at) < SIZE // 1024 * 0.1, "the kernel kept the pages"
        assert code[:] == content  # read back from the file, the same bytes
        data.seek(0)
        assert data.read() == content
    finally:
        code.close()
        data.close()


def _start(path) -> int:
    with open("/proc/self/maps") as maps:
        for line in maps:
            if line.rstrip().endswith(str(path)):
                return int(line.split("-")[0], 16)
    raise AssertionError(f"{path} is not mapped")


def test_only_private_read_only_file_mappings_are_chosen():
    maps = "\n".join(
        [
            "7f0000000000-7f0000001000 r--p 00000000 fd:00 1 /usr/lib/libpython3.12.so.1.0",
            "7f0000001000-7f0000003000 r-xp 00001000 fd:00 1 /usr/lib/libpython3.12.so.1.0",
            "7f0000003000-7f0000004000 rw-p 00003000 fd:00 1 /usr/lib/libpython3.12.so.1.0",
            "7f0000004000-7f0000005000 r--s 00000000 fd:00 2 /dev/shm/shared",
            "7f0000005000-7f0000006000 r--p 00000000 fd:00 3 /tmp/gone (deleted)",
            "7f0000006000-7f0000007000 rw-p 00000000 00:00 0 [heap]",
            "7f0000007000-7f0000008000 r--p 00000000 00:00 0",
            "7f0000008000-7f0000009000 ---p 00000000 fd:00 1 /usr/lib/libpython3.12.so.1.0",
        ]
    )
    assert read_only_file_mappings(maps) == [(0x7F0000000000, 0x7F0000001000), (0x7F0000001000, 0x7F0000003000)]
