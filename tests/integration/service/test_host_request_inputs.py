"""Host requests and the state directory through the real CLI: a --deadline of 400 digits is
refused (it was infinity, stored as null: a drain that never expires); a user who may not read
the agent's state (root with its DAC capabilities dropped, standing in for a non-root user:
the tests' Python is root's) and a drain.json with fields of the wrong type each get one line,
never a traceback; an agent whose state directory others can write refuses to start."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import orjson
import pytest

from tests.support.agentproc import agent_env

HUGE = "9" * 400
NO_DAC = ["setpriv", "--inh-caps=-all", "--bounding-set=-dac_override,-dac_read_search,-fowner"]


def cli(env: dict[str, str], *args: str, prefix: list[str] | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [*(prefix or []), sys.executable, "-m", "faden_agent", *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )


def one_line(done: subprocess.CompletedProcess) -> str:
    assert "Traceback" not in done.stderr + done.stdout, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    return lines[0]


@pytest.fixture
def enrolled_state(tmp_path) -> dict[str, str]:
    """A state directory as an enrolled machine has it (the agent itself not running)."""
    env = agent_env(tmp_path, backend_url="http://127.0.0.1:9")
    state = Path(env["FADEN_NODE_AGENT_STATE_PATH"])
    state.parent.mkdir(mode=0o700, parents=True)
    state.write_text("{}")
    state.chmod(0o600)
    return env


def test_a_deadline_of_400_digits_is_refused(enrolled_state):
    done = cli(enrolled_state, "drain", "--deadline", HUGE)
    assert done.returncode == 2 and "at most 86400 seconds" in one_line(done)
    done = cli(enrolled_state, "cordon", "--wait", HUGE + "h")
    assert done.returncode == 2 and "--wait" in one_line(done)


def test_a_user_who_may_not_read_the_state_gets_one_line(enrolled_state):
    state_dir = Path(enrolled_state["FADEN_NODE_AGENT_STATE_PATH"]).parent
    os.chown(state_dir, 1234, 1234)  # another user's state, as root's is to a non-root user
    for action in ("drain", "cordon", "uncordon"):
        done = cli(enrolled_state, action, "--wait", "1s", prefix=NO_DAC)
        assert done.returncode == 1 and "cannot read the agent's state" in one_line(done), action
    os.chown(state_dir, 0, 0)
    done = cli(enrolled_state, "status", prefix=NO_DAC)
    assert "Traceback" not in done.stderr + done.stdout


def test_a_drain_json_of_wrong_types_is_no_traceback(enrolled_state):
    state_dir = Path(enrolled_state["FADEN_NODE_AGENT_STATE_PATH"]).parent
    (state_dir / "drain.json").write_bytes(
        orjson.dumps({"state": "draining", "answers": "x", "containers": [1], "since": "yesterday"})
    )
    done = cli(enrolled_state, "drain", "--wait", "1s")
    assert done.returncode == 4 and "no answer from the backend" in one_line(done)  # none runs here
    done = cli(enrolled_state, "status", "--json")
    assert done.returncode in (0, 1) and orjson.loads(done.stdout)["drain"]["state"] == "draining", done.stderr


def test_the_agent_refuses_a_state_directory_others_can_write(enrolled_state):
    state_dir = Path(enrolled_state["FADEN_NODE_AGENT_STATE_PATH"]).parent
    state_dir.chmod(0o777)
    (state_dir / "agent.lock").symlink_to(state_dir.parent / "planted")  # what another user could leave
    done = cli(enrolled_state, "run")
    assert done.returncode == 1
    assert "state directory" in done.stderr and "writable by others" in done.stderr, done.stderr
    assert "Traceback" not in done.stderr and not (state_dir.parent / "planted").exists()  # nothing created
