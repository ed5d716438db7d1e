"""What `faden-agent run` does to its own process before any worker or child starts.

The enrollment token leaves the environment (exec'd children and /proc/PID/environ never see
it) and core dumps are off (RLIMIT_CORE 0, PR_SET_DUMPABLE 0): a dump would hold the credential.
"""

from __future__ import annotations

import ctypes
import logging
import os
import resource
from pathlib import Path

from faden_agent.common.proctitle import unset_environ
from faden_agent.config import VARIABLES, env_name

log = logging.getLogger(__name__)

PR_SET_DUMPABLE = 4
SECRET_VARIABLES = tuple(v.field for v in VARIABLES if v.secret)


def drop_secrets_from_environ() -> None:
    for name in unset_environ(*(env_name(field) for field in SECRET_VARIABLES)):
        _blank_initial_value(name)


def _blank_initial_value(name: str) -> None:
    """Zero the value in the block the kernel copied at exec (what /proc/PID/environ shows,
    here and in forked workers); unsetenv only drops the pointer to it. Nothing points into
    it any more, so overwriting it in place is safe."""
    try:
        stat = Path("/proc/self/stat").read_text()
        fields = stat[stat.rindex(")") + 2 :].split()  # fields[0] is field 3 of proc(5)
        env_start, env_end = int(fields[50 - 3]), int(fields[51 - 3])
        block = Path("/proc/self/environ").read_bytes()[: env_end - env_start]
        key = name.encode() + b"="
        at = 0 if block.startswith(key) else block.find(b"\0" + key) + 1
        if at <= 0 and not block.startswith(key):
            return
        start = at + len(key)
        end = block.find(b"\0", start)
        end = len(block) if end < 0 else end
        ctypes.memset(env_start + start, 0, end - start)
    except (OSError, ValueError, IndexError) as exc:
        log.debug("could not blank %s in the initial environment: %s", name, exc)


def disable_core_dumps() -> None:
    try:
        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    except (ValueError, OSError) as exc:
        log.warning("cannot turn core dumps off (RLIMIT_CORE): %s", exc)
    try:
        libc = ctypes.CDLL(None, use_errno=True)  # the process's own libc (find_library would run ldconfig)
        if libc.prctl(PR_SET_DUMPABLE, 0, 0, 0, 0) != 0:
            raise OSError(ctypes.get_errno(), os.strerror(ctypes.get_errno()))
    except OSError as exc:
        log.warning("cannot mark the agent non-dumpable (PR_SET_DUMPABLE): %s", exc)


def harden_process() -> None:
    drop_secrets_from_environ()
    disable_core_dumps()
