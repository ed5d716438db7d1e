"""The floors as a contract: import-linter's contracts in pyproject.toml hold for the code, and
an import that runs up a floor, joins two workers, or gives the reference backend a worker
breaks them (shown on a copy of the package with such imports added)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import faden_agent

ROOT = Path(faden_agent.__file__).parent
REPO = ROOT.parent
# lint-imports, run by this interpreter (its script may lie outside PATH)
LINT_IMPORTS = "import sys; from importlinter.cli import lint_imports_command; sys.exit(lint_imports_command())"


def lint_imports(cwd: Path) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, PYTHONPATH=str(cwd))
    command = [sys.executable, "-c", LINT_IMPORTS, "--no-cache", str(REPO / "pyproject.toml")]
    return subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True, timeout=120)


def test_the_floors_hold():
    result = lint_imports(REPO)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "0 broken" in result.stdout


def test_each_kind_of_breach_breaks_its_contract(tmp_path):
    copy = tmp_path / "faden_agent"
    shutil.copytree(ROOT, copy, ignore=shutil.ignore_patterns("__pycache__"))
    breaches = {
        # a worker reaching up to the supervisor
        "workers/logs/worker.py": "import faden_agent.supervisor.arbiter",
        # one worker importing another
        "workers/executor/worker.py": "import faden_agent.workers.stream.link",
        # the reference backend importing a worker
        "devbackend/store.py": "import faden_agent.workers.inventory.record",
        # a helper reaching up to the workers' shared room
        "protocol/container.py": "import faden_agent.backend.outbox",
    }
    for path, line in breaches.items():
        with (copy / path).open("a") as f:
            f.write(f"\n{line}  # noqa\n")
    (copy / "newroom.py").write_text('"""A new room nobody gave a floor."""\n')
    result = lint_imports(tmp_path)
    out = result.stdout
    assert result.returncode == 1, out + result.stderr
    assert "faden_agent.workers.logs.worker -> faden_agent.supervisor.arbiter" in out
    assert "faden_agent.workers.executor.worker -> faden_agent.workers.stream.link" in out
    assert "faden_agent.devbackend.store -> faden_agent.workers.inventory.record" in out
    assert "faden_agent.protocol.container -> faden_agent.backend.outbox" in out
    assert "faden_agent.newroom" in out  # exhaustive: every room is on a floor
    assert "3 broken" in out
