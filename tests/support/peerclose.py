"""Whether the far end of a connection closed it, for tests of servers that must end one
(unread data the far end held turns its close into a reset)."""

from __future__ import annotations

import socket


def closed_by_peer(sock: socket.socket, timeout_s: float = 2.0) -> bool:
    """True once the far end closed (EOF or a reset); False when it stays open `timeout_s`."""
    sock.settimeout(timeout_s)
    try:
        return sock.recv(1) == b""
    except ConnectionResetError:
        return True
    except TimeoutError:
        return False
