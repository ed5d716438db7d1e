"""The reference backend stays out of the agent's runtime: neither the CLI module (which
the supervisor imports) nor the stream worker pulls in its server or store."""

from __future__ import annotations

import subprocess
import sys


def test_agent_runtime_does_not_import_the_backend_server():
    code = (
        "import sys, faden_agent.cli.app, faden_agent.workers.stream.worker; "
        "print(sorted(m for m in sys.modules if m.startswith(('faden_agent.devbackend.', 'http.server'))"
        " and m not in ('faden_agent.devbackend.cli',)))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True).stdout
    assert out.strip() == "[]", out
