"""The footprint figures the documents quote are the last measurement's (bench/figures.json,
written by `python3 bench/run_all.py --write-docs`): README.md's and docs/benchmarks.md's
tables are the ones bench/figures.py renders from it, and the README states no idle-tree
figure of its own beside them."""

from __future__ import annotations

import re

import pytest

from bench import figures


@pytest.mark.parametrize("name", sorted(figures.DOCUMENTS))
def test_each_documents_tables_are_the_last_measurements(name):
    text = (figures.REPO / name).read_text()
    rendered = figures.with_blocks(text, figures.load(), figures.DOCUMENTS[name])
    assert rendered == text, f"{name}'s figures are not bench/figures.json's; run: python3 bench/run_all.py --docs-only"


def test_the_readme_quotes_the_idle_tree_only_from_the_table():
    text = (figures.REPO / "README.md").read_text()
    _, begin, end = figures.SUMMARY
    outside = text[: text.index(begin)] + text[text.index(end) :]
    stray = re.findall(r"idle tree[^.\n|]*?\d+(?:\.\d+)? ?MiB", outside)
    assert stray == [], f"the README states idle-tree figures outside the generated table: {stray}"
    idle = figures.load()["idle"]
    assert f"{idle['3.12']['tree_pss_quiet_mib']} MiB" in text


def test_a_changed_figure_changes_the_rendered_table():
    current = figures.load()
    changed = {**current, "idle": {**current["idle"], "3.12": {**current["idle"]["3.12"], "tree_pss_quiet_mib": 999.9}}}
    assert "999.9 MiB" in figures.render_summary(changed)
    assert "999.9 MiB" not in figures.render_summary(current)


def test_the_tables_do_not_depend_on_the_order_a_run_holds_its_figures_in():
    # what --write-docs renders from the run's own dict is what the check renders from the file
    current = figures.load()
    reordered = {
        **current,
        "idle": {
            version: {**idle, "processes": dict(reversed(list(idle["processes"].items())))}
            for version, idle in current["idle"].items()
        },
    }
    assert figures.render_budget(reordered) == figures.render_budget(current)
