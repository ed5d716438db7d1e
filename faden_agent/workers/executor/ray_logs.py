"""The host directory a managed Ray container writes its logs into (mounted at
protocol.RAY_LOG_MOUNT): writable by the container's user, not by everybody.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import Any

from faden_agent.common.errorline import error_line

log = logging.getLogger(__name__)

RAY_IMAGE_OWNER = (1000, 100)  # rayproject/ray: user "ray", group "users"
ROOT_MODE = 0o700
DIR_MODE = 0o750


def owner_of(user: str | None) -> tuple[int, int]:
    """(uid, gid) for Docker's `user` value: "" or None -> root; "uid[:gid]" numeric as given
    (gid defaults to uid); a name -> RAY_IMAGE_OWNER."""
    if not user:
        return (0, 0)
    uid, _, gid = user.partition(":")
    if uid.isdigit() and (not gid or gid.isdigit()):
        return (int(uid), int(gid or uid))
    return RAY_IMAGE_OWNER


def image_user(ops: Any, image: str) -> str | None:
    """The image's configured user (None when it cannot be read: the name default applies)."""
    try:
        return ((ops.engine.inspect_image(image).get("Config") or {}).get("User")) or ""
    except Exception as exc:  # noqa: BLE001 - the directory still gets made, with the Ray default
        log.warning("cannot read the user of image %s (%s); assuming Ray's", image, error_line(exc))
        return None


def make_ray_log_dir(root: Path, name: str, user: str | None) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    os.chmod(root, ROOT_MODE)
    host_dir = root / name
    host_dir.mkdir(exist_ok=True)
    if os.geteuid() == 0:
        uid, gid = owner_of(user) if user is not None else RAY_IMAGE_OWNER
        os.chown(host_dir, uid, gid, follow_symlinks=False)
        os.chmod(host_dir, DIR_MODE)
    else:
        os.chmod(host_dir, 0o777)  # unreachable for others: the parent is 0700
    return host_dir
