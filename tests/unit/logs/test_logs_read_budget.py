"""The Ray reader's per-container read budget: listing charged to it leaves the container in
debt (no read, no listing granted) and the debt is bounded."""

from __future__ import annotations

from faden_agent.workers.logs.sources.ray.tail import MAX_DEBT_S, ReadBudget


def test_a_charge_leaves_the_container_in_debt_and_others_untouched():
    budget = ReadBudget(1000)
    assert budget.take("a", 400) == 400
    budget.charge("a", 10**9)  # far more than the bound on debt
    assert budget.take("a", 0, peek=True) == 0
    assert budget.take("a", 100) == 0  # nothing granted while in debt, never a negative grant
    left, _at = budget.left["a"]
    assert left >= -MAX_DEBT_S * 1000
    assert budget.take("b", 100) == 100  # another container's budget is its own
