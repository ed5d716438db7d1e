"""What the backend expects this agent to be (`hello`'s `expected`), for `status`: the
version it expects beside the running one, and the capabilities this build lacks.
Bounded and type-checked: a hostile `hello` can put nothing big or odd in the status file."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from faden_agent import __version__, protocol

if TYPE_CHECKING:
    from faden_agent.protocol.status import LinkCounters

MAX_TEXT = 64
MAX_CAPABILITIES = 64


def _text(value: Any) -> str | None:
    return value[:MAX_TEXT] if isinstance(value, str) and value.isprintable() and value else None


def expectations(expected: Any) -> LinkCounters:
    """The link status fields: running_version, expected_version, missing_capabilities."""
    out: LinkCounters = {"running_version": __version__, "expected_version": None, "missing_capabilities": []}
    if not isinstance(expected, dict):
        return out
    out["expected_version"] = _text(expected.get("version"))
    wanted = expected.get("capabilities")
    if isinstance(wanted, list):
        names = {name for name in map(_text, wanted[:MAX_CAPABILITIES]) if name}
        out["missing_capabilities"] = sorted(names - set(protocol.CAPABILITIES))
    return out
