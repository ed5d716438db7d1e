"""The peer worker's tick out of file descriptors (a connection flood holds them all): the
round is refused with a reason and the worker goes on. A real EMFILE: the child
process lowers its own descriptor limit to what it has open."""

from __future__ import annotations

import subprocess
import sys

from tests.support.agentproc import free_port

CHILD = """
import os, resource, sys
from faden_agent.config import load_config
from faden_agent.workers.peer.worker import PeerWorker

config = load_config({
    "FADEN_NODE_AGENT_RUNTIME_DIR": sys.argv[1] + "/run",
    "FADEN_NODE_AGENT_STATE_PATH": sys.argv[1] + "/state/state.json",
    "FADEN_NODE_AGENT_PEER_PORT": sys.argv[2],
    "FADEN_NODE_AGENT_ADVERTISE_HOST": "127.0.0.1",
})
worker = PeerWorker(config)
worker.setup()
worker.tickets.path.mkdir(parents=True, exist_ok=True)
(worker.tickets.path / "some-ticket").write_text("{}")
highest = max(int(fd) for fd in os.listdir("/proc/self/fd"))
resource.setrlimit(resource.RLIMIT_NOFILE, (highest, highest))  # the next open fails EMFILE
worker.tick()  # the listen and the tickets' directory both meet EMFILE
print(worker.tick_error)
"""


def test_emfile_in_the_tick_is_a_refusal_not_an_exit(tmp_path):
    argv = [sys.executable, "-c", CHILD, str(tmp_path), str(free_port())]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip().startswith("tick refused: Too many open files"), done.stdout
