"""Reading sysfs (or a fake tree in its place): one small attribute at a time, opened without
blocking (a FIFO put in a fake tree answers empty) and read up to MAX_ATTR bytes; whatever
cannot be read is None, never an exception."""

from __future__ import annotations

import os
import re
from pathlib import Path

MAX_ATTR = 256
BUS_ID = re.compile(r"[0-9a-f]{4,8}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]")  # a PCI address as sysfs names it


def read_attr(path: str | Path) -> str | None:
    """The attribute's text, stripped; None when absent, unreadable or empty."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        value = os.read(fd, MAX_ATTR).decode("utf-8", "replace").strip()
    except OSError:  # serials are root's only; a driver may refuse a read
        return None
    finally:
        os.close(fd)
    return value or None


def read_int(path: str | Path, base: int = 10) -> int | None:
    """The attribute as a whole number (base 16 takes `0x10de` too); None when it is none."""
    text = read_attr(path)
    try:
        return int(text, base) if text is not None else None
    except ValueError:
        return None


def list_dir(path: str | Path, limit: int = 256) -> list[str]:
    """The sorted names in a directory (at most `limit`); [] when there is none."""
    try:
        return sorted(os.listdir(path))[:limit]
    except OSError:
        return []


def sysfs_bus_id(nvml_bus_id: str) -> str | None:
    """NVML's `00000000:17:00.0` as sysfs names it (`0000:17:00.0`); None when it is no PCI address."""
    text = nvml_bus_id.strip().lower()
    domain, sep, rest = text.partition(":")
    if not sep:
        return None
    candidate = f"{domain[-4:].rjust(4, '0')}:{rest}"
    return candidate if BUS_ID.fullmatch(candidate) else None
