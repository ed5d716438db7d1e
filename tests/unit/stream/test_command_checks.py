"""protocol.command_problem: the one check of a command's id, seq, kind and deadline that
the downlink (parse_command) and the executor (accept) share, so they cannot drift again.
Each hostile value is refused with one short line naming the field."""

from __future__ import annotations

import pytest

from faden_agent import protocol
from faden_agent.workers.stream.downlink import parse_command

GOOD = {"type": "command", "id": "c-1", "seq": 7, "kind": "container.run", "spec": {}, "deadline": None}

HOSTILE = {  # field -> value, and a word the reason must contain
    "bool seq": ("seq", True, "seq"),
    "float seq": ("seq", 7.0, "seq"),
    "zero seq": ("seq", 0, "seq"),
    "negative seq": ("seq", -1, "seq"),
    "seq past int64": ("seq", 2**63, "seq"),
    "huge seq": ("seq", 10**5000, "bits"),  # repr() of it would raise ValueError (int digit limit)
    "string seq": ("seq", "7", "seq"),
    "missing seq": ("seq", None, "seq"),
    "empty id": ("id", "", "id"),
    "blank id": ("id", "   ", "id"),
    "int id": ("id", 7, "id"),
    "non-ASCII id of many bytes": ("id", "é" * 200, "400 bytes"),  # 200 characters, 400 bytes
    "huge id": ("id", "x" * 1_000_000, "bytes"),
    "int kind": ("kind", 3, "kind"),
    "missing kind": ("kind", None, "kind"),
    "bool deadline": ("deadline", True, "deadline"),
    "string deadline": ("deadline", "soon", "deadline"),
}


@pytest.mark.parametrize("case", sorted(HOSTILE))
def test_each_hostile_value_is_refused_in_one_short_line_by_both_sides(case):
    field, value, word = HOSTILE[case]
    message = {**GOOD, field: value}
    problem = protocol.command_problem(message)
    assert problem is not None and word in problem and field in problem
    assert "\n" not in problem and len(problem) < 200, problem
    with pytest.raises(ValueError) as refused:  # the downlink skips it with the same reason
        parse_command(message)
    assert str(refused.value) == problem


def test_a_good_command_passes_and_the_id_limit_is_in_bytes():
    assert protocol.command_problem(GOOD) is None
    assert parse_command(GOOD)["id"] == "c-1"
    assert protocol.command_problem({**GOOD, "id": "é" * 128}) is None  # 256 bytes
    assert protocol.command_problem({**GOOD, "id": "é" * 128 + "x"}) is not None  # 257 bytes
    assert protocol.command_problem({**GOOD, "seq": 2**63 - 1, "deadline": 1.5}) is None
    assert (
        protocol.command_problem(["not", "an", "object"])
        == "a command is a JSON object, not list ['not', 'an', 'object']"
    )
