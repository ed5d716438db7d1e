"""Room on the Docker engine's data root before something big lands there (a pull, a peer
transfer): NoSpace names the bytes needed and free, raised before anything is written, or
by SpaceWatch as an unsized transfer writes. A data root this process cannot see (the agent
in a container) is not checked."""

from __future__ import annotations

import shutil
from typing import Any

# Room kept free beyond the estimate: the engine's own metadata, other containers' writes.
SPACE_MARGIN = 256 << 20
WATCH_EVERY_BYTES = 16 << 20  # SpaceWatch reads the free space again after this many bytes


class NoSpace(Exception):
    """Not enough disk where the image lands: no other source will change that."""

    def __init__(self, message: str, needed_bytes: int, free_bytes: int):
        super().__init__(message)
        self.needed_bytes = needed_bytes
        self.free_bytes = free_bytes


def data_root_free(api: Any) -> tuple[str | None, int | None]:
    """(the engine's data root, its free bytes); free is None where it is not visible here."""
    root = api.info().get("DockerRootDir")
    try:
        return root, shutil.disk_usage(root).free if root else None
    except OSError:
        return root, None


def require_space(api: Any, estimate: int, what: str) -> None:
    """NoSpace unless the data root has `estimate` plus the margin free."""
    root, free = data_root_free(api)
    need = estimate + SPACE_MARGIN
    if free is not None and free < need:
        raise NoSpace(f"{what} needs about {need} bytes on {root}, {free} are free", need, free)


class SpaceWatch:
    """The data root's free space read again every WATCH_EVERY_BYTES of a transfer whose size
    was not told: NoSpace once less than SPACE_MARGIN is left (a peer may send up to the 64
    GiB default otherwise)."""

    def __init__(self, api: Any, what: str):
        self.root, _ = data_root_free(api)
        self.what = what
        self.written = 0
        self._unchecked = 0

    def wrote(self, size: int) -> None:
        self.written += size
        self._unchecked += size
        if self._unchecked < WATCH_EVERY_BYTES or not self.root:
            return
        self._unchecked = 0
        try:
            free = shutil.disk_usage(self.root).free
        except OSError:
            return
        if free < SPACE_MARGIN:
            raise NoSpace(
                f"{self.what}: {free} bytes are free on {self.root} after {self.written} bytes arrived, "
                f"under the {SPACE_MARGIN}-byte margin kept free; stopped",
                SPACE_MARGIN,
                free,
            )
