"""The README stays true: its two commands lead, and its variable table is config.py's."""

import re
from pathlib import Path

from faden_agent.config import VARIABLES, env_name
from tests.newcomer import readme_first_command

README = (Path(__file__).resolve().parents[2] / "README.md").read_text()


def test_readme_starts_with_the_two_commands():
    head = "\n".join(README.splitlines()[:12])
    assert "bash .ci/run" in head
    # Command 1 installs into an environment of its own: a PEP 668 system Python refuses pip
    # (tests/integration/test_readme_newcomer.py runs it on such a Debian 12).
    first = readme_first_command()
    assert first.startswith("python3 -m venv ") and first.endswith("faden-agent up"), first
    assert "python3 -m pip install" not in first, first


def test_readme_table_rows_are_the_declared_variables_in_order():
    """One row per setting, in config.py's declaration order: a new, renamed, moved or removed
    setting fails here until the table follows."""
    assert list(readme_rows()) == [env_name(v.field) for v in VARIABLES]


def test_readme_rows_name_secrets_and_old_names():
    """A secret says so in its row, and a variable read under an old name names it."""
    rows = readme_rows()
    secret_rows = {name for name, (_, meaning) in rows.items() if "(secret)" in meaning}
    assert secret_rows == {env_name(v.field) for v in VARIABLES if v.secret}
    unnamed = [env_name(o) for v in VARIABLES for o in v.old_fields if env_name(o) not in rows[env_name(v.field)][1]]
    assert unnamed == []


def test_ci_runs_the_readme_test_command():
    ci = (Path(__file__).resolve().parents[2] / ".ci" / "run").read_text()
    assert re.search(r'^xdist="-n \d+ ', ci, re.M) and "python3 -m pytest $xdist -m" in ci
    assert "tests/infra/start-services.sh" in ci


def readme_rows() -> dict[str, tuple[str, str]]:
    """{variable: (default cell, description cell)} of the README's variable table."""
    rows = {}
    for line in README.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) >= 3 and cells[0].startswith("`FADEN_NODE_AGENT_"):
            rows[cells[0].strip("`")] = (cells[1], cells[2])
    return rows


def test_readme_defaults_are_the_declared_ones():
    """The table's default column follows config.py's VARIABLES (the one declaration); a
    computed default (None there) is described in words; a number may add its unit, `(64 GiB)`."""
    rows = readme_rows()
    wrong = {}
    for var in VARIABLES:
        cell = rows[env_name(var.field)][0]
        declared = f"`{var.default}`" if var.default else "empty"
        if (
            var.default is not None
            and cell != declared
            and not re.fullmatch(re.escape(declared) + r" \([^()|]+\)", cell)
        ):
            wrong[env_name(var.field)] = (cell, var.default)
    assert wrong == {}, "README default cells differ from config.py"
