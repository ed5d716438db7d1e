"""The CLI's help without docstrings: the standalone binary is built at -OO (packaging/build.sh,
--optimize 2), which leaves every docstring out, so each command's help must be given as text.
Every command and group of the tree, under `python -OO`, has help, and the same as without -OO."""

from __future__ import annotations

import subprocess
import sys

import orjson

HELP_OF_EVERY_COMMAND = """
import sys, orjson, typer
from faden_agent.cli.app import app
def walk(command, path):
    yield " ".join(path), command.help or ""
    for name, sub in sorted((getattr(command, "commands", None) or {}).items()):
        yield from walk(sub, [*path, name])
sys.stdout.buffer.write(orjson.dumps(dict(walk(typer.main.get_command(app), ["faden-agent"]))))
"""


def help_texts(*flags: str) -> dict[str, str]:
    done = subprocess.run(
        [sys.executable, *flags, "-c", HELP_OF_EVERY_COMMAND], capture_output=True, timeout=60, check=True
    )
    return orjson.loads(done.stdout)


def test_every_command_keeps_its_help_without_docstrings():
    optimized = help_texts("-OO")
    assert len(optimized) > 25 and {"faden-agent run", "faden-agent gpu reset", "faden-agent admin send"} <= set(
        optimized
    )
    assert [path for path, text in optimized.items() if not text.strip()] == []
    assert optimized == help_texts()
