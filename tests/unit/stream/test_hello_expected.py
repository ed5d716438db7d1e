"""The bounds on what `hello`'s `expected` may put in the status: bounded and type-checked."""

from __future__ import annotations

from faden_agent import __version__, protocol
from faden_agent.workers.stream.expected import expectations


def test_expected_is_bounded_and_type_checked():
    assert expectations(None) == {"running_version": __version__, "expected_version": None, "missing_capabilities": []}
    hostile = expectations(
        {
            "version": "9" * 10_000,
            "capabilities": [*protocol.CAPABILITIES, 7, "x\nforged", *[f"c{i}" for i in range(500)]],
        }
    )
    assert hostile["expected_version"] == "9" * 64
    assert "x\nforged" not in hostile["missing_capabilities"] and len(hostile["missing_capabilities"]) <= 64
    assert expectations({"version": 3, "capabilities": "all"})["expected_version"] is None
    wanted = expectations({"version": "0.2.0", "capabilities": [protocol.CAPABILITIES[0], "future.thing"]})
    assert wanted["expected_version"] == "0.2.0" and wanted["missing_capabilities"] == ["future.thing"]
