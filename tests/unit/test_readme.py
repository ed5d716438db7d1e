"""The README stays true: its two commands lead, and it documents every variable."""

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


def test_readme_documents_every_variable():
    missing = [env_name(v.field) for v in VARIABLES if f"`{env_name(v.field)}`" not in README]
    assert not missing, f"README.md lacks rows for {missing}"


def test_ci_runs_the_readme_test_command():
    ci = (Path(__file__).resolve().parents[2] / ".ci" / "run").read_text()
    assert "python3 -m pytest -n 2" in ci and "tests/infra/start-services.sh" in ci
