"""The rig's teardown after a killed test process (a module of its own: the rig lock is
free only when no module-scoped rig is up)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.cluster import rig as rigmod
from tests.cluster.conftest import require_rig

pytestmark = [pytest.mark.cluster, pytest.mark.docker]


def leftovers() -> dict[str, object]:
    links = subprocess.run(["ip", "-o", "link", "show"], capture_output=True, text=True).stdout
    return {
        "namespaces": rigmod.rig_namespaces(),
        "links": [
            link.split(":")[1].strip()
            for link in links.splitlines()
            if rigmod.BRIDGE in link or f" {rigmod.HOST_VETH_PREFIX}" in link
        ],
        "dirs": list(Path("/tmp").glob(rigmod.DIR_PREFIX + "*")),
        "processes": rigmod._processes_using_rig_dirs(),
    }


def test_stop_removes_everything_also_after_kill_9(tmp_path):
    require_rig()
    # a rig process killed -9 mid-life leaves namespaces, links, engines and directories ...
    script = (
        "import time\nfrom tests.cluster.rig import Rig\nr = Rig(2).start()\nprint('up', flush=True)\ntime.sleep(600)\n"
    )
    proc = subprocess.Popen(
        [sys.executable, "-c", script],
        stdout=subprocess.PIPE,
        cwd=Path(__file__).parents[2],
        env={**os.environ, "PYTHONPATH": str(Path(__file__).parents[2])},
    )
    assert proc.stdout.readline().strip() == b"up"
    assert leftovers()["namespaces"] and len(leftovers()["processes"]) >= 2 + 2 + 1  # engines, agents, backend
    proc.send_signal(signal.SIGKILL)
    proc.wait(10)
    # ... which the next rig (here: its clean-up alone, under the lock) removes
    rig = rigmod.Rig(1, docker=False, agents=False)
    rig._lock()
    try:
        rigmod.remove_leftovers()
    finally:
        rig.stop()
    deadline = time.monotonic() + 10
    while any(leftovers().values()) and time.monotonic() < deadline:
        time.sleep(0.5)
    assert not any(leftovers().values()), leftovers()
