"""Where the system bus is, read without loading the D-Bus code (dbusconn.py): its address,
the unix socket an address names, and whether that socket is there at all. Every failure
is DbusError with one line."""

from __future__ import annotations

import os

SYSTEM_BUS = "unix:path=/run/dbus/system_bus_socket"


class DbusError(Exception):
    def __init__(self, message: str, name: str | None = None):
        super().__init__(message)
        self.name = name  # the D-Bus error name of an ERROR reply


def system_bus_address() -> str:
    """DBUS_SYSTEM_BUS_ADDRESS (the variable libdbus and sd-bus read), else the standard socket."""
    return os.environ.get("DBUS_SYSTEM_BUS_ADDRESS") or SYSTEM_BUS


def socket_address(address: str) -> str:
    """The unix socket of the first usable `unix:path=` or `unix:abstract=` entry."""
    for entry in address.split(";"):
        kind, _, params = entry.partition(":")
        values = dict(p.split("=", 1) for p in params.split(",") if "=" in p)
        if kind == "unix" and "path" in values:
            return values["path"]
        if kind == "unix" and "abstract" in values:
            return "\0" + values["abstract"]
    raise DbusError(f"no unix socket in the bus address {address[:200]!r}")


def bus_socket_missing(address: str) -> str | None:
    """Why no bus can answer at `address` (no unix socket named, or its path is not there),
    or None: one may (an abstract socket cannot be looked at without connecting)."""
    try:
        path = socket_address(address)
    except DbusError as exc:
        return str(exc)
    if not path.startswith("\0") and not os.path.exists(path):
        return f"no system bus socket at {path[:200]}"
    return None
