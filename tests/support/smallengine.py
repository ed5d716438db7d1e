"""A private dockerd whose data root is a small tmpfs, reaching the shared registry at its
usual address (a port into the engine's network namespace); under FADEN_TEST_ENGINE=29 a
real Engine 29 whose whole folder (containerd's store too) is that tmpfs."""

from __future__ import annotations

import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from tests.conftest import ENGINE_UNDER_TEST
from tests.support.engine29 import Engine29
from tests.support.netnsforward import NetnsForward
from tests.support.privateengine import PrivateEngine


@contextmanager
def small_engine(size: str, registry: str | None = None, image: str | None = None) -> Iterator[PrivateEngine]:
    root = Path(tempfile.mkdtemp(prefix="fx29-", dir="/tmp"))  # a short socket path
    if ENGINE_UNDER_TEST == "29":
        data = root / "engine"  # the 29 engine's images live in containerd's root beside dockerd's
        data.mkdir(parents=True)
        subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(data)], check=True)
        try:
            with Engine29(data, image) as engine29:  # on the host's network: 127.0.0.1:5000 as it is
                yield engine29
        finally:
            subprocess.run(["umount", "-l", str(data)], check=False)
            shutil.rmtree(root, ignore_errors=True)
        return
    data = root / "engine" / "data"
    data.mkdir(parents=True)
    subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(data)], check=True)
    try:
        with PrivateEngine(root / "engine", image) as engine:
            if registry is None:
                yield engine
            else:
                host, port = registry.rsplit(":", 1)
                with NetnsForward(engine.pid, host, int(port)):
                    yield engine
    finally:
        subprocess.run(["umount", "-l", str(data)], check=False)
        shutil.rmtree(root, ignore_errors=True)


def free_bytes(engine: PrivateEngine) -> int:
    return shutil.disk_usage(engine.root / "data").free


def used_bytes(engine: PrivateEngine) -> int:
    return shutil.disk_usage(engine.root / "data").used
