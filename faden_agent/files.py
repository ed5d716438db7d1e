"""One way to replace a small file atomically: a temp file in the same directory, written
(and fsynced), given its mode, then renamed over the old one, so a reader or a crash sees
either the old content or the new, never half of it."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path


def replace_file(path: Path, data: bytes, mode: int = 0o600, fsync: bool = True) -> None:
    path = Path(path)
    # A private file gets a private directory when we create one; others a readable one.
    path.parent.mkdir(mode=0o700 if not mode & 0o077 else 0o755, parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}-", dir=path.parent)  # created 0600
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            if fsync:
                fh.flush()
                os.fsync(fh.fileno())
        os.chmod(tmp, mode)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def replace_file_if_changed(path: Path, data: bytes, mode: int = 0o600) -> bool:
    """replace_file unless the file already holds exactly this, with this mode; True if written."""
    try:
        if path.read_bytes() == data and path.stat().st_mode & 0o777 == mode:
            return False
    except FileNotFoundError:
        pass
    replace_file(path, data, mode)
    return True
