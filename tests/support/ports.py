"""A free TCP port for a test's server, chosen outside the kernel's ephemeral range: a port
the kernel handed out for bind(0) is also what it gives the next outgoing connection of any
process, which can take it between the pick and the server's bind (or its restart's)."""

from __future__ import annotations

import random
import socket

EPHEMERAL_RANGE = "/proc/sys/net/ipv4/ip_local_port_range"
LOWEST = 10000  # below: well-known services a machine may run
TRIES = 200


def ephemeral_range() -> tuple[int, int]:
    try:
        with open(EPHEMERAL_RANGE) as fh:
            low, high = (int(n) for n in fh.read().split())
        return low, high
    except (OSError, ValueError):
        return 32768, 60999  # Linux's default


def free_port(host: str = "127.0.0.1") -> int:
    """A port nothing listens on now, outside the ephemeral range (the kernel's pick when
    none is: bind(0))."""
    low, high = ephemeral_range()
    spans = [span for span in (range(LOWEST, low), range(high + 1, 65536)) if len(span) > 0]
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    for _ in range(TRIES if spans else 0):
        port = random.choice(random.choice(spans))
        with socket.socket(family) as sock:
            try:
                sock.bind((host, port))
            except OSError:
                continue  # taken (or held in TIME_WAIT): another
            return port
    with socket.socket(family) as sock:
        sock.bind((host, 0))
        return sock.getsockname()[1]
