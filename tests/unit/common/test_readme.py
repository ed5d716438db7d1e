"""The README stays true: its two commands lead, and its variable table is the one rendered from
config.py's declarations (faden_agent/cli/config_table.py)."""

import difflib
import re
import subprocess
import sys
from pathlib import Path

import pytest

from faden_agent.cli import config_table
from faden_agent.config import VARIABLES, Variable, env_name
from tests.support.newcomer import readme_first_command

REPO = Path(__file__).resolve().parents[3]
README = (REPO / "README.md").read_text()


def test_readme_starts_with_the_two_commands():
    head = "\n".join(README.splitlines()[:12])
    assert "bash .ci/run" in head
    # Command 1 installs into an environment of its own: a PEP 668 system Python refuses pip
    # (tests/integration/service/test_readme_newcomer.py runs it on such a Debian 12).
    first = readme_first_command()
    assert first.startswith("python3 -m venv ") and first.endswith("faden-agent up"), first
    assert "python3 -m pip install" not in first, first


def test_ci_runs_the_readme_test_command():
    ci = (Path(__file__).resolve().parents[3] / ".ci" / "run").read_text()
    assert re.search(r'^xdist="-n \d+ ', ci, re.M) and "python3 -m pytest $xdist -m" in ci
    assert "tests/infra/start-services.sh" in ci


def test_readme_variable_table_is_the_one_config_py_renders():
    """Names, order, defaults, help, secrets and old names all come from config.py: any edit of a
    declaration (or of the table by hand) fails here until the table is rendered again."""
    current = config_table.with_table(README)
    diff = "\n".join(
        difflib.unified_diff(README.splitlines(), current.splitlines(), "README.md", "rendered", n=0, lineterm="")
    )
    assert current == README, f"the README's variable table is not config.py's; run: {config_table.COMMAND}\n{diff}"


def rendered_rows() -> dict[str, list[str]]:
    rows = [line.strip("|").split(" | ") for line in config_table.render().splitlines()[2:]]
    return {cells[0].strip(" `"): [c.strip() for c in cells[1:]] for cells in rows}


def test_secrets_show_no_default_and_say_so():
    secrets = [v for v in VARIABLES if v.secret]
    assert secrets, "the enrollment token is declared secret"
    rows = rendered_rows()
    for var in secrets:
        default, meaning = rows[env_name(var.field)]
        assert (default, meaning.endswith(" (secret)")) == ("unset", True)


def test_old_names_are_named_in_their_row():
    renamed = [v for v in VARIABLES if v.old_fields]
    assert renamed, "WORKER_LIVENESS_SEC was WORKER_HEARTBEAT_SEC"
    rows = rendered_rows()
    for var in renamed:
        assert all(f"`{env_name(old)}`" in rows[env_name(var.field)][1] for old in var.old_fields)


def test_the_prefork_switch_row_states_its_measured_cost():
    default, meaning = rendered_rows()[env_name("prefork")]
    assert default == "`on`" and "MiB more PSS over the idle tree" in meaning and "footprint_bench.py" in meaning


@pytest.mark.parametrize(
    ("variable", "culprit"),
    [
        (Variable("shell_pipe", "1", str, "a | b"), "FADEN_NODE_AGENT_SHELL_PIPE"),
        (Variable("two_lines", "1", str, "one\ntwo"), "FADEN_NODE_AGENT_TWO_LINES"),
        (Variable("blank", None, str, " "), "FADEN_NODE_AGENT_BLANK"),
        (Variable("key", "abc", str, "a key", secret=True), "FADEN_NODE_AGENT_KEY is a secret"),
        (Variable("key", None, str, "a key", secret=True, default_words="k"), "FADEN_NODE_AGENT_KEY is a secret"),
    ],
)
def test_a_declaration_that_would_break_the_table_fails_naming_it(variable, culprit):
    with pytest.raises(ValueError, match=culprit):
        config_table.render([variable])


def test_write_rewrites_only_the_marked_table(tmp_path):
    """The documented command, run for real: text around the markers stays byte for byte, a second
    run changes nothing, and a file without the markers is left alone with a one-line reason."""
    before = "# title\n\nintro |\n\n"
    after = "\n\n## next\n| a | b |\n"
    readme = tmp_path / "README.md"
    readme.write_text(f"{before}{config_table.BEGIN}\n| stale | row |\n{config_table.END}{after}")
    argv = [sys.executable, "-m", "faden_agent.cli.config_table", "--write", str(readme)]
    first = subprocess.run(argv, cwd=REPO, capture_output=True, text=True, check=True)
    assert "rewritten" in first.stdout
    assert readme.read_text() == f"{before}{config_table.BEGIN}\n{config_table.render()}\n\n{config_table.END}{after}"
    second = subprocess.run(argv, cwd=REPO, capture_output=True, text=True, check=True)
    assert "already current" in second.stdout

    bare = tmp_path / "bare.md"
    bare.write_text("no table here\n")
    assert config_table.main(["--write", str(bare)]) == 1
    assert bare.read_text() == "no table here\n"
