"""Every command kind and spec key the executor takes is the first release's or declared by a
capability (faden_agent/protocol/capabilities.py), so a backend can tell which agents take it;
no declaration names a kind or key the executor lacks; hello and heartbeats report them all;
docs/protocol.md's table is the declarations rendered."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from faden_agent import protocol
from faden_agent.cli import capabilities_table
from faden_agent.protocol.capabilities import (
    CAPABILITIES,
    DECLARED,
    FIRST_RELEASE_CAPABILITIES,
    FIRST_RELEASE_KINDS,
    declared_pairs,
)
from faden_agent.workers.executor.commands import KINDS
from faden_agent.workers.executor.kinds import CommandKind

DOCS = Path(__file__).parents[3] / "docs" / "protocol.md"
HOW = (
    "declare it in faden_agent/protocol/capabilities.py: a new Capability(name, since=faden_agent.__version__,"
    " commit, means, kinds={kind: keys} or keys={kind: keys}) in DECLARED, then run"
    f" `{capabilities_table.COMMAND}`"
)


def taken(registry: Mapping[str, CommandKind]) -> set[tuple[str, str | None]]:
    """(kind, None) for each kind and (kind, key) for each spec key the registry takes."""
    pairs: set[tuple[str, str | None]] = set()
    for name, kind in registry.items():
        pairs.add((name, None))
        pairs |= {(name, key) for key in (*kind.required, *kind.optional)}
    return pairs


def undeclared(registry: Mapping[str, CommandKind]) -> list[str]:
    declared = declared_pairs()
    return sorted(f"{kind}:{key}" if key else f"kind {kind}" for kind, key in taken(registry) - set(declared))


def test_every_kind_and_key_has_the_first_release_or_a_capability():
    assert undeclared(KINDS) == [], HOW


def test_a_kind_or_key_added_without_a_capability_is_named():
    run = KINDS["container.run"]
    extra = CommandKind("gpu.example", run.handler, {"uuid": run.required["name"]})
    grown = CommandKind(run.name, run.handler, run.required, {**run.optional, "new_key": run.optional["env"]})
    assert undeclared({**KINDS, "gpu.example": extra}) == ["gpu.example:uuid", "kind gpu.example"]
    assert undeclared({**KINDS, "container.run": grown}) == ["container.run:new_key"]


def test_no_declaration_names_what_the_executor_lacks():
    stale = sorted(f"{kind}:{key}" if key else f"kind {kind}" for kind, key in set(declared_pairs()) - taken(KINDS))
    assert stale == []


def test_hello_and_heartbeats_report_every_capability_once():
    assert protocol.CAPABILITIES == CAPABILITIES
    assert CAPABILITIES == FIRST_RELEASE_CAPABILITIES + tuple(c.name for c in DECLARED)
    assert len(set(CAPABILITIES)) == len(CAPABILITIES)
    assert set(FIRST_RELEASE_KINDS) <= set(KINDS)
    for capability in DECLARED:
        assert capability.since and capability.commit and capability.means, capability.name
        assert not set(capability.kinds) & set(FIRST_RELEASE_KINDS), f"{capability.name}: a first-release kind"


def test_docs_table_is_the_declarations_rendered():
    text = DOCS.read_text()
    assert capabilities_table.with_table(text) == text, f"run: {capabilities_table.COMMAND}"
    for capability in DECLARED:
        assert f"| `{capability.name}` | {capability.since} ({capability.commit}) |" in text


def test_the_documented_command_rewrites_the_table(tmp_path, capsys):
    doc = tmp_path / "protocol.md"
    doc.write_text(f"before\n{capabilities_table.BEGIN}\n| stale |\n{capabilities_table.END}\nafter\n")
    assert capabilities_table.COMMAND.endswith("--write docs/protocol.md")
    assert capabilities_table.main(["--write", str(doc)]) == 0 and "rewritten" in capsys.readouterr().out
    assert capabilities_table.render() in doc.read_text() and "| stale |" not in doc.read_text()
