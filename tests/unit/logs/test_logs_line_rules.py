"""What a read line becomes: a long one cut with a marker at a character boundary, invalid UTF-8
replaced, a journal field's value (text, binary, repeated, missing) as text."""

from __future__ import annotations

from faden_agent.workers.logs.entry import MAX_LINE_BYTES, clean_line
from faden_agent.workers.logs.sources.journald.source import field_text


def test_long_lines_are_cut_with_a_marker_at_a_character_boundary():
    line = clean_line(("é" * MAX_LINE_BYTES).encode())  # 2 bytes each: the cut falls inside one
    head, marker = line.split(" [faden-agent: truncated ")
    assert head == "é" * (MAX_LINE_BYTES // 2)
    assert marker == f"{MAX_LINE_BYTES} bytes]"
    assert clean_line("short") == "short"


def test_invalid_utf8_is_replaced_not_fatal():
    assert clean_line(b"ok \xff\xfe end") == "ok \ufffd\ufffd end"


def test_journal_field_values_text_binary_repeated_missing():
    assert field_text("plain") == "plain"
    assert field_text([104, 105, 255]) == "hi\ufffd"  # binary: an array of byte values
    assert field_text(["one", [116, 119, 111]]) == "one\ntwo"  # a field that occurs twice
    assert field_text(None) == ""
