"""`faden-agent up` without a backend URL: the embedded reference backend for trying the agent,
and an agent whose state and runtime folders are its own (under the backend's data folder),
never a real install's: the state file it enrolls is bound to the embedded backend."""

from __future__ import annotations

import contextlib
import os
import secrets
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

from faden_agent.config import default_runtime_dir, default_state_path, env_name
from faden_agent.devbackend.admin import AdminClient, AdminError
from faden_agent.service.paths import agent_command

ADMIN_TOKEN_FILE = "admin-token"
AGENT_STATE = "agent/state.json"  # under the data folder
START_TIMEOUT_S = 20.0


class UpError(RuntimeError):
    pass


def up_paths(data: Path | None, environ: dict[str, str]) -> tuple[Path, dict[str, str]]:
    """The embedded backend's data folder and the agent's state path and runtime folder.

    The state file named by FADEN_NODE_AGENT_STATE_PATH is the agent's when set, with the
    data folder beside it; unset, the data folder is dev-backend/ beside the default state file
    and the agent's state lies inside it (agent/state.json) and its runtime folder beside the
    default one (`-up`), so a real install on the same machine finds its own untouched."""
    state, runtime = env_name("state_path"), env_name("runtime_dir")
    if environ.get(state):
        chosen = Path(environ[state]).expanduser()
        data_dir = data or chosen.parent / "dev-backend"
        return data_dir, {state: str(chosen)}
    data_dir = data or Path(default_state_path()).parent / "dev-backend"
    own = {state: str(data_dir / AGENT_STATE)}
    if not environ.get(runtime):
        own[runtime] = default_runtime_dir() + "-up"
    return data_dir, own


def admin_token(data_dir: Path) -> str:
    """The embedded backend's admin token: kept across runs, readable only by this user."""
    path = data_dir / ADMIN_TOKEN_FILE
    data_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
    if not path.exists():
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as fh:
            fh.write(secrets.token_urlsafe(24) + "\n")
    return path.read_text().strip()


@contextlib.contextmanager
def embedded_backend(port: int, data_dir: Path, state_path: Path) -> Iterator[dict[str, str]]:
    """Run the reference backend while the block runs; yields the agent's extra environment."""
    token = admin_token(data_dir)
    url = f"http://127.0.0.1:{port}"
    log_path = data_dir / "dev-backend.log"
    argv = [*agent_command(), "dev-backend", "--host", "127.0.0.1", "--port", str(port), "--data", str(data_dir)]
    with open(log_path, "ab") as log:
        backend = subprocess.Popen(
            argv,
            env={**os.environ, "FADEN_ADMIN_TOKEN": token},
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    try:
        admin = AdminClient(url, token, timeout_s=2)
        _wait_until_up(admin, backend, log_path)
        extra = {"FADEN_NODE_AGENT_BACKEND_URL": url}
        if not state_path.exists():
            extra["FADEN_NODE_AGENT_ENROLLMENT_TOKEN"] = admin.mint_token()
        print(
            f"faden-agent up: reference backend at {url} (data {data_dir}, log {log_path}); "
            f"admin token in {data_dir / ADMIN_TOKEN_FILE}",
            file=sys.stderr,
            flush=True,
        )
        yield extra
    finally:
        backend.terminate()
        try:
            backend.wait(10)
        except subprocess.TimeoutExpired:
            backend.kill()
            backend.wait()


def _wait_until_up(admin: AdminClient, backend: subprocess.Popen, log_path: Path) -> None:
    deadline = time.monotonic() + START_TIMEOUT_S
    while True:
        if backend.poll() is not None:
            tail = log_path.read_text(errors="replace").strip().splitlines()[-1:] or ["no output"]
            raise UpError(f"the reference backend exited ({backend.returncode}): {tail[0]}")
        try:
            admin.nodes()
            return
        except AdminError:
            if time.monotonic() > deadline:
                raise UpError(
                    f"the reference backend did not answer within {START_TIMEOUT_S:.0f}s (see {log_path})"
                ) from None
            time.sleep(0.1)
