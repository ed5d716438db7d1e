"""py-spy, run as a subprocess against one process: `py-spy dump --json` (with `--native`
where it unwinds), bounded in time and output bytes, killed past either (and the target sent
SIGCONT: a tracer killed mid-read must not leave it stopped); a target another tracer holds
is tried again until the deadline; a failure is a DumpFailed with a bounded reason
(no_py_spy, cannot_attach, not_python, timeout, too_large, failed)."""

from __future__ import annotations

import os
import select
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import orjson

from faden_agent.common.parentdeath import dies_with_parent

MAX_OUTPUT_BYTES = 4 << 20  # a dump of 200 threads x 50 frames is about 3 MiB of JSON
MAX_ERROR_BYTES = 4 << 10
# py-spy's words for a process it may not read, and for one that runs no Python.
DENIED = ("Permission denied", "Operation not permitted", "os error 1)", "os error 13)")
NOT_PYTHON = ("Failed to find python version", "Failed to find a python interpreter")
# ptrace's EPERM at attaching: most often another tracer (a second py-spy, a debugger) holds it
SUSPEND_FAILED = "Failed to suspend process"
RETRY_PAUSE_S = 0.25
MAX_TASKS = 4096  # threads looked at for a tracer


class DumpFailed(Exception):
    def __init__(self, reason: str, message: str):
        super().__init__(message)
        self.reason = reason


def binary() -> str | None:
    """The py-spy executable: bundled beside the standalone agent, in this interpreter's
    scripts directory (pip installs it there from its wheel), else on PATH."""
    import sysconfig  # here: its paths read the build's configuration, 0.6 MiB of objects

    candidates = [
        Path(getattr(sys, "_MEIPASS", "/nonexistent")) / "py-spy",
        Path(sys.executable).parent / "py-spy",
        Path(sysconfig.get_path("scripts")) / "py-spy",
    ]
    for candidate in candidates:
        if candidate.is_file() and os.access(candidate, os.X_OK):
            return str(candidate)
    return shutil.which("py-spy")


def dump(pid: int, timeout_s: float, native: bool = True) -> list[dict[str, Any]]:
    """py-spy's threads of `pid` (its JSON), native frames merged in when `native`; where
    native unwinding fails, the Python frames alone (a `native_error` on the first thread).
    Refused at attaching, it tries again once, and on while a tracer holds a thread."""
    program = binary()
    if program is None:
        raise DumpFailed("no_py_spy", "py-spy is not installed (it comes with the agent's py-spy dependency)")
    deadline = time.monotonic() + timeout_s
    argv = [program, "dump", "--pid", str(int(pid)), "--json"]
    refused = 0
    while True:
        try:
            return _dump_once(argv, deadline, native)
        except DumpFailed as exc:
            if exc.reason in ("timeout", "too_large"):
                resume(pid)
                raise
            if exc.reason != "cannot_attach" or SUSPEND_FAILED not in str(exc):
                raise
            holder = tracer(pid)
            refused += 1
            if (holder is None and refused > 1) or time.monotonic() + 2 * RETRY_PAUSE_S > deadline:
                raise DumpFailed("cannot_attach", f"{exc}{held_by(holder)}"[:500]) from None
            time.sleep(RETRY_PAUSE_S)


def _dump_once(argv: list[str], deadline: float, native: bool) -> list[dict[str, Any]]:
    if not native:
        return _parse(*run_bounded(argv, deadline))
    try:
        return _parse(*run_bounded([*argv, "--native"], deadline))
    except DumpFailed as exc:
        if exc.reason != "failed":
            raise
        threads = _parse(*run_bounded(argv, deadline))  # e.g. libunwind's UNW_EBADREG
        if threads:
            threads[0]["native_error"] = str(exc)[:300]
        return threads


def tracer(pid: int, proc_root: str = "/proc") -> int | None:
    """The pid tracing one of the process's threads (their TracerPid), None when none does."""
    try:
        tids = os.listdir(f"{proc_root}/{pid}/task")[:MAX_TASKS]
    except OSError:
        return None
    for tid in tids:
        try:
            with open(f"{proc_root}/{pid}/task/{tid}/status", encoding="ascii", errors="replace") as fh:
                line = next((line for line in fh if line.startswith("TracerPid:")), "TracerPid: 0")
            holder = int(line.split()[1])
        except (OSError, ValueError, IndexError):
            continue
        if holder:
            return holder
    return None


def held_by(holder: int | None) -> str:
    """The tracer as the reason names it; its name is whatever it set (one line, printable)."""
    if holder is None:
        return ""
    try:
        with open(f"/proc/{holder}/comm", encoding="utf-8", errors="replace") as fh:
            name = "".join(c if c.isprintable() else "?" for c in fh.read(64).removesuffix("\n"))
    except OSError:
        name = "gone"
    return f"; pid {holder} ({name}) traces it"


def resume(pid: int) -> None:
    """SIGCONT to a process py-spy may have held stopped when it was killed."""
    try:
        os.kill(pid, signal.SIGCONT)
    except OSError:
        pass  # gone, or not ours to signal


def _parse(returncode: int, out: bytes, err: bytes) -> list[dict[str, Any]]:
    words = err.decode(errors="replace")
    if returncode != 0:
        message = f"py-spy: {error_words(words) or f'exit status {returncode}'}"[:400]
        if any(word in words for word in DENIED):
            raise DumpFailed("cannot_attach", message)
        if any(word in words for word in NOT_PYTHON):
            raise DumpFailed("not_python", message)
        raise DumpFailed("failed", message)
    try:
        threads = orjson.loads(out)
    except orjson.JSONDecodeError as exc:
        raise DumpFailed("failed", f"py-spy wrote no JSON: {exc}"[:300]) from None
    if not isinstance(threads, list):
        raise DumpFailed("failed", "py-spy wrote JSON that is not a list of threads")
    return [thread for thread in threads if isinstance(thread, dict)]


def error_words(stderr: str) -> str:
    """py-spy's error line and its causes, without its Rust backtrace: "Error: Failed to get
    process executable name... (Permission denied (os error 13))"."""
    lines = [line.strip() for line in stderr.splitlines() if line.strip()]
    first = next((line for line in lines if not line.startswith(("Caused by", "Stack backtrace"))), "")
    causes: list[str] = []
    if "Caused by:" in lines:
        for line in lines[lines.index("Caused by:") + 1 :]:
            if line.startswith("Stack backtrace"):
                break
            cause = line.partition(": ")[2] if line[:1].isdigit() else line
            causes += [cause] if cause not in causes else []
    return f"{first} ({'; '.join(causes)})" if causes else first


def run_bounded(argv: list[str], deadline: float) -> tuple[int, bytes, bytes]:
    """(exit status, stdout, stderr) of argv, killed at `deadline` (DumpFailed timeout) or
    past MAX_OUTPUT_BYTES of output (DumpFailed too_large)."""
    proc = subprocess.Popen(
        dies_with_parent(argv), stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )
    assert proc.stdout is not None and proc.stderr is not None
    out, err = bytearray(), bytearray()
    streams = {proc.stdout.fileno(): out, proc.stderr.fileno(): err}
    try:
        while streams:
            left = deadline - time.monotonic()
            if left <= 0:
                raise DumpFailed("timeout", f"py-spy gave no whole answer in time ({' '.join(argv[1:4])})")
            ready, _, _ = select.select(list(streams), [], [], left)
            for fd in ready:
                chunk = os.read(fd, 65536)
                if not chunk:
                    del streams[fd]
                    continue
                kept = streams[fd]
                if fd == proc.stderr.fileno():
                    kept += chunk[: max(0, MAX_ERROR_BYTES - len(kept))]
                    continue
                kept += chunk
                if len(kept) > MAX_OUTPUT_BYTES:
                    raise DumpFailed("too_large", f"py-spy's dump is over {MAX_OUTPUT_BYTES} bytes")
        return proc.wait(max(0.1, deadline - time.monotonic())), bytes(out), bytes(err)
    except subprocess.TimeoutExpired:
        raise DumpFailed("timeout", "py-spy did not exit in time") from None
    finally:
        if proc.poll() is None:
            proc.kill()  # it detaches from the target as it dies (ptrace ends with the tracer)
            proc.wait()
        proc.stdout.close()
        proc.stderr.close()
