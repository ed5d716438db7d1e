"""The enrollment token once spent: it leaves the env file (a new one stays), and `run`'s process
hardening drops it from the environment and turns core dumps off."""

from __future__ import annotations

import os
import subprocess
import sys

from faden_agent.service.envfile import forget_token, read_env, write_env


def test_the_spent_token_leaves_the_env_file_and_a_new_one_stays(tmp_path):
    path = tmp_path / "agent.env"
    write_env(path, {"FADEN_NODE_AGENT_ENROLLMENT_TOKEN": "new", "FADEN_NODE_AGENT_LOG_LEVEL": "debug"})
    assert forget_token(path, "spent") is False  # someone put a new token there: kept
    assert forget_token(path, "new") is True
    assert read_env(path) == {"FADEN_NODE_AGENT_LOG_LEVEL": "debug"}
    assert oct(path.stat().st_mode & 0o777) == "0o600"


def test_harden_process_drops_the_token_and_core_dumps():
    script = (
        "import ctypes, subprocess\n"
        "from faden_agent.cli.hardening import harden_process\n"
        "harden_process()\n"
        "print(open('/proc/self/environ', 'rb').read().count(b'tok-secret-9'))\n"
        "print(subprocess.run(['env'], capture_output=True, text=True).stdout.count('tok-secret-9'))\n"
        "print(ctypes.CDLL('libc.so.6').prctl(3, 0, 0, 0, 0))\n"  # PR_GET_DUMPABLE
        "import resource; print(resource.getrlimit(resource.RLIMIT_CORE))\n"
    )
    env = {**os.environ, "FADEN_NODE_AGENT_ENROLLMENT_TOKEN": "tok-secret-9"}
    out = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, check=True).stdout
    assert out.split("\n")[:4] == ["0", "0", "0", "(0, 0)"], out
