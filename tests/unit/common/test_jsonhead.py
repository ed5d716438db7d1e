"""jsonhead.leading_members: what the first bytes of an over-cap stream line say for sure."""

from __future__ import annotations

import pytest

from faden_agent.http.jsonhead import HEAD_BYTES, leading_members

LINE = b'{"type": "command", "seq": 42, "id": "c-1", "kind": "container.run", "spec": {"env": {"BIG": "xxxx'


@pytest.mark.parametrize(
    "head, members",
    [
        (LINE, {"type": "command", "seq": 42, "id": "c-1", "kind": "container.run"}),
        (b'{"type": "command", "seq": 123', {"type": "command"}),  # 123 may be the start of 1234
        (b'{"spec": {"id": "inner", "seq": 1}, "x": "yyy', {"spec": {"id": "inner", "seq": 1}}),  # nested: not top
        (b'{"spec": {"id": "inner"', {}),
        (b'{"id": "\\ud800", "seq": 1}', {}),  # orjson refuses a lone surrogate in a whole line too
        (b'{"id": "\xc3\xa9", "seq": 1, "x": "\xc3', {"id": "\u00e9", "seq": 1}),  # cut inside a character
        (b'{"id": "\xff", "seq": 1}', {}),  # not UTF-8
        (b'{"seq": NaN, "id": "c"}', {}),
        (b'{"a": ' + b"[" * 3000, {}),  # deep nesting: RecursionError inside, not out
        (b"[1, 2]", {}),
        (b"", {}),
        (b'{"id": "c-2", "seq": 7}', {"id": "c-2", "seq": 7}),
    ],
)
def test_only_complete_top_level_members_are_read(head, members):
    assert leading_members(head) == members


def test_only_the_first_head_bytes_are_read():
    head = b'{"pad": "' + b"p" * HEAD_BYTES + b'", "id": "late", "seq": 1}'
    assert leading_members(head) == {}
