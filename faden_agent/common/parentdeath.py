"""A child program that dies with the thread that started it: its command line behind
`setpriv --pdeathsig KILL` (util-linux) where setpriv is there, so no reader or helper the
agent runs (journalctl, py-spy) outlives a killed worker."""

from __future__ import annotations

import shutil


def dies_with_parent(argv: list[str]) -> list[str]:
    setpriv = shutil.which("setpriv")
    return [setpriv, "--pdeathsig", "KILL", "--", *argv] if setpriv else argv
