"""Room on the Docker engine's data root before something big lands there (a pull, a peer
transfer): NoSpace names the bytes needed and free, raised before anything is written.
A data root this process cannot see (the agent in a container) is not checked."""

from __future__ import annotations

import shutil
from typing import Any

# Room kept free beyond the estimate: the engine's own metadata, other containers' writes.
SPACE_MARGIN = 256 << 20


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
