"""The test receiver's snappy decoder (tests/support/snappyblock.py) reads what the agent's
compressor (cramjam, the real library) writes, byte for byte, and refuses a broken block."""

from __future__ import annotations

import os

import cramjam
import pytest

from tests.support import snappyblock


@pytest.mark.parametrize(
    "data",
    [
        b"",
        b"x",
        b"abc" * 10_000,
        os.urandom(70_000),
        b"".join(b"line %d payload payload\n" % (i % 97) for i in range(40_000)),
    ],
)
def test_what_the_agents_compressor_writes_reads_back_the_same(data):
    raw = bytes(cramjam.snappy.compress_raw(data))
    assert snappyblock.uncompressed_length(raw) == len(data)
    assert snappyblock.decompress(raw) == data


@pytest.mark.parametrize(
    "raw",
    [
        b"\x05\x00a",  # says 5 bytes, holds 1
        b"\x03\x01\x00",  # a copy before anything was written
        b"\x04\x08ab",  # a literal cut short
        b"\xff\xff\xff\xff\xff\xff",  # a length that never ends
        bytes(cramjam.snappy.compress_raw(b"hello world" * 100))[:-3],  # truncated
    ],
)
def test_a_broken_block_is_refused(raw):
    with pytest.raises(ValueError):
        snappyblock.decompress(raw)
