"""Where the IPC sockets live: one runtime directory, mode 0700, owned by the agent's user.

Unix-domain sockets inherit no access control of their own that ZeroMQ would check; the
directory's mode is what keeps other local users from reaching the executor.
"""

from __future__ import annotations

from pathlib import Path
from typing import NamedTuple

from faden_agent.disk.files import ensure_private_dir


def ensure_runtime_dir(path: Path) -> Path:
    """The runtime directory, checked as every private directory is (disk.files.ensure_private_dir)."""
    return ensure_private_dir(path, "runtime directory")


class Endpoints(NamedTuple):
    """The ipc:// address of every socket, derived from the runtime directory."""

    runtime_dir: Path

    def _ipc(self, name: str) -> str:
        return f"ipc://{self.runtime_dir / name}.sock"

    @property
    def control(self) -> str:
        """Supervisor REP: `ps`, the worker table (CLI, stream worker)."""
        return self._ipc("control")

    @property
    def liveness(self) -> str:
        """Supervisor PULL: every worker PUSHes its "alive" messages (and "thread_died") here."""
        return self._ipc("liveness")

    @property
    def executor(self) -> str:
        """Executor REP: the stream worker hands over commands and gets an ack."""
        return self._ipc("executor")

    @property
    def logs(self) -> str:
        """Log worker REP: the executor asks whether a container's last lines are shipped
        before it removes the container (`drain`)."""
        return self._ipc("logs")

    @property
    def inventory(self) -> str:
        """Inventory worker REP: its door (ipc/inventory_door.py), e.g. the executor's gpu.forget."""
        return self._ipc("inventory")

    @property
    def reports_ready(self) -> str:
        """Stream PULL: producers wake the stream worker's outbox sender after writing to the outbox."""
        return self._ipc("reports-ready")

    def socket_path(self, address: str) -> Path:
        return Path(address.removeprefix("ipc://"))
