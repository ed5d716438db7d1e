"""The bounded pieces of the log readers, on their own: the container line cutter, the head
of a cut journal entry, and who owns a Ray log directory."""

from __future__ import annotations

from faden_agent.workers.executor.ray_logs import RAY_IMAGE_OWNER, owner_of
from faden_agent.workers.logs.sources.containers.source import LineCutter
from faden_agent.workers.logs.sources.journald.source import message_head


def test_line_cutter_holds_at_most_its_limit_and_cuts_once_per_long_line():
    cutter = LineCutter(10)
    out = []
    for chunk in [b"ab", b"c\nde", b"f" * 30, b"g\nhi\n", b"xyz"]:
        out += list(cutter.feed(chunk))
        assert len(cutter.pending) <= 10
    assert out == [(b"abc", 0), (b"deffffffff", 10), (b"hi", 0)]
    assert cutter.rest() == (b"xyz", 0)


def test_line_cutter_keeps_empty_lines_and_a_line_of_exactly_the_limit():
    cutter = LineCutter(4)
    assert list(cutter.feed(b"\n\nabcd\nabcde\n")) == [(b"", 0), (b"", 0), (b"abcd", 0), (b"abcd", 4)]
    assert cutter.rest() is None


def test_message_head_of_a_cut_entry_binary_and_text():
    binary = b'{"__CURSOR":"s=1","MESSAGE":[104,105,0,255,10'  # cut inside the array
    assert message_head(binary) == "hi\x00\ufffd"
    text = b'{"__CURSOR":"s=1","MESSAGE":"line one\\nline \\u00e9 two \\u00'  # cut inside an escape
    assert message_head(text) == "line one\nline \u00e9 two "
    assert message_head(b'{"__CURSOR":"s=1","_PID":"1"') == ""


def test_owner_of_the_ray_log_directory():
    assert owner_of(None) == (0, 0) and owner_of("") == (0, 0)
    assert owner_of("1000") == (1000, 1000) and owner_of("1000:100") == (1000, 100)
    assert owner_of("ray") == RAY_IMAGE_OWNER and owner_of("ray:users") == RAY_IMAGE_OWNER


def test_an_oversize_entry_finds_its_fields_in_any_order_across_pieces():
    import io

    from faden_agent.workers.logs.sources.journald.source import MAX_ENTRY_BYTES, skip_line

    message = b'"MESSAGE":[' + b"65," * (MAX_ENTRY_BYTES // 2) + b"66]"
    line = (
        b'{"_BOOT_ID":"b",' + message + b',"PRIORITY":"3","__REALTIME_TIMESTAMP":"1700000000000000",'
        b'"__CURSOR":"s=1;i=2"}\n'
    )
    stream = io.BufferedReader(io.BytesIO(line))
    head = stream.readline(MAX_ENTRY_BYTES)
    skipped, found = skip_line(stream, head)
    assert len(head) + skipped == len(line)
    assert (found["__CURSOR"], found["PRIORITY"], found["__REALTIME_TIMESTAMP"]) == (
        b"s=1;i=2",
        b"3",
        b"1700000000000000",
    )
    assert found["MESSAGE"].startswith(b'"MESSAGE":[65,65')
