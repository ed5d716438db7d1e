"""Host facts from psutil and the kernel: who and what this machine is, and its load."""

from __future__ import annotations

import os
import platform
import socket
from typing import Any

import psutil

from faden_agent import __version__
from faden_agent.config import Config


def cpu_model() -> str | None:
    """The CPU's marketing name from /proc/cpuinfo ("model name"; "Model" on some ARM)."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as fh:
            for line in fh:
                key, _, value = line.partition(":")
                if key.strip() in ("model name", "Model") and value.strip():
                    return value.strip()
    except OSError:
        pass
    return platform.processor() or None


def os_name() -> str:
    try:
        return platform.freedesktop_os_release().get("PRETTY_NAME") or platform.system()
    except OSError:
        return platform.system()


def probe_host(config: Config) -> dict[str, Any]:
    memory = psutil.virtual_memory()
    swap = psutil.swap_memory()
    load1, load5, load15 = os.getloadavg()
    return {
        "hostname": socket.gethostname(),
        "agent_id": config.agent_id,
        "agent_version": __version__,
        "os": os_name(),
        "kernel": platform.release(),
        "arch": platform.machine(),
        "boot_time": psutil.boot_time(),
        "cpu_model": cpu_model(),
        "cpu_logical": psutil.cpu_count(logical=True),
        "cpu_physical": psutil.cpu_count(logical=False),
        "memory_total": memory.total,
        "swap_total": swap.total,
        "route_address": config.route_address,
        "host": config.host,
        "advertise_host": config.advertise_host,
        "advertise_scheme": config.advertise_scheme,
        "peer_port": config.peer_port,  # where peers fetch images: advertise_scheme://advertise_host:peer_port
        "usage": {
            "load_avg": [round(load1, 2), round(load5, 2), round(load15, 2)],
            "cpu_percent": psutil.cpu_percent(interval=None),  # since the previous call
            "memory_used": memory.total - memory.available,
            "memory_available": memory.available,
            "swap_used": swap.used,
        },
    }
