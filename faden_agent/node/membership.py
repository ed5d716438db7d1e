"""This machine's membership (node id, credential, backend URL) and the file that keeps it:
FADEN_NODE_AGENT_STATE_PATH, called "the state file" in operator docs and messages.
"""

from __future__ import annotations

import hashlib
import os
import secrets
import tempfile
import time
from pathlib import Path
from typing import NamedTuple

import orjson

from faden_agent.disk.files import replace_file

MEMBERSHIP_VERSION = 1


class MembershipError(RuntimeError):
    """The membership (state) file cannot be used; str() is the one-line message for the operator."""


class Membership(NamedTuple):
    backend_url: str
    node_id: str
    credential: str
    agent_id: str
    enrolled_at: float
    enrolled_with: str = ""  # sha256 of the token spent for it: never presented again

    def spent(self, token: str) -> bool:
        """Whether `token` is the one this membership was bought with."""
        return bool(self.enrolled_with) and token_digest(token) == self.enrolled_with

    def __repr__(self) -> str:  # keep the credential out of any accidental log line
        return f"Membership(node_id={self.node_id!r}, backend_url={self.backend_url!r}, agent_id={self.agent_id!r})"

    def __str__(self) -> str:  # a NamedTuple body takes no alias (`__str__ = __repr__`)
        return self.__repr__()


def load_membership(path: Path) -> Membership | None:
    """The membership, or None when the file does not exist (not enrolled yet)."""
    path = Path(path)
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise MembershipError(f"state file {path} is unreadable ({exc.strerror}); fix its permissions") from None
    try:
        data = orjson.loads(raw)
    except orjson.JSONDecodeError:
        raise MembershipError(
            f"state file {path} is corrupt (not JSON); restore it from a backup or remove it to enroll again"
        ) from None
    if not isinstance(data, dict) or data.get("version") != MEMBERSHIP_VERSION:
        raise MembershipError(f"state file {path} is not a version-{MEMBERSHIP_VERSION} faden-agent state file")
    try:
        return Membership(
            backend_url=_text(data, "backend_url"),
            node_id=_text(data, "node_id"),
            credential=_text(data, "credential"),
            agent_id=_text(data, "agent_id"),
            enrolled_at=float(data.get("enrolled_at") or 0.0),
            enrolled_with=str(data.get("enrolled_with") or ""),
        )
    except (KeyError, TypeError, ValueError) as exc:
        raise MembershipError(f"state file {path} is corrupt: {exc}") from None


def _text(data: dict, key: str) -> str:
    value = data.get(key)
    if not isinstance(value, str) or not value:
        raise KeyError(f"field {key!r} is missing or empty")
    return value


def check_backend(membership: Membership, backend_url: str, path: Path) -> None:
    """Refuse a state file written for another backend (a credential is only valid at its issuer)."""
    if membership.backend_url.rstrip("/") != backend_url.rstrip("/"):
        raise MembershipError(
            f"state file {path} belongs to backend {membership.backend_url}, not {backend_url}; "
            "set FADEN_NODE_AGENT_BACKEND_URL back, or move the state file away to enroll with the new backend"
        )


def write_membership(path: Path, membership: Membership) -> None:
    """Write a new state file atomically; refuses to replace an existing one."""
    path = Path(path)
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    data = orjson.dumps({"version": MEMBERSHIP_VERSION, **membership._asdict()}, option=orjson.OPT_INDENT_2)
    fd, tmp = tempfile.mkstemp(prefix=".state-", dir=path.parent)  # mkstemp creates it 0600
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        _publish(tmp, path)
    except FileExistsError:
        raise MembershipError(f"state file {path} already exists; it is never overwritten") from None
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
    _fsync_dir(path.parent)


def rotate_credential(path: Path, membership: Membership, credential: str) -> Membership:
    """The same membership with the backend's new credential, written over the state file
    atomically (0600, fsync of file and directory): a death leaves the old file or the new."""
    rotated = membership._replace(credential=credential)
    data = orjson.dumps({"version": MEMBERSHIP_VERSION, **rotated._asdict()}, option=orjson.OPT_INDENT_2)
    replace_file(Path(path), data, 0o600)
    _fsync_dir(Path(path).parent)
    return rotated


def _fsync_dir(directory: Path) -> None:
    dir_fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)


def supersede_membership(path: Path, membership: Membership) -> Path:
    """Re-enrollment (a rejected credential plus a new token): the old file is kept beside
    as `<name>.rejected-<UTC time>` (never deleted), then the new one is written. Returns
    where the old one went. A death in between leaves no state file: the next start
    enrolls again with the same attempt id, which the backend answers again."""
    path = Path(path)
    aside = path.with_name(f"{path.name}.rejected-{time.strftime('%Y%m%dT%H%M%SZ', time.gmtime())}")
    os.replace(path, aside)
    write_membership(path, membership)
    return aside


def _publish(tmp: str, path: Path) -> None:
    """Atomically give the temp file its final name, never replacing an existing file."""
    try:
        os.link(tmp, path)  # like rename, but fails when the target exists
    except FileExistsError:
        raise
    except OSError:  # a file system without hard links: check, then rename
        if path.exists():
            raise FileExistsError(path) from None
        os.rename(tmp, path)


def new_membership(backend_url: str, node_id: str, credential: str, agent_id: str, token: str = "") -> Membership:
    return Membership(
        backend_url=backend_url,
        node_id=node_id,
        credential=credential,
        agent_id=agent_id,
        enrolled_at=time.time(),
        enrolled_with=token_digest(token) if token else "",
    )


def token_digest(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


ENROLLMENT_ATTEMPT_FILE = "enrollment-attempt"


def enrollment_attempt_id(state_dir: Path) -> str:
    """This machine's enrollment attempt id, made (0600) before the token is spent.

    If the agent dies after the backend answered but before the state file is on disk, the
    next start presents the same token with the same id, and the backend answers again for
    the same node instead of refusing a spent token (docs/protocol.md, Enrollment)."""
    path = Path(state_dir) / ENROLLMENT_ATTEMPT_FILE
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        existing = path.read_text().strip()
        if existing:
            return existing
        fd = os.open(path, os.O_WRONLY | os.O_TRUNC)
    attempt = secrets.token_hex(16)
    with os.fdopen(fd, "w") as fh:
        fh.write(attempt + "\n")
        fh.flush()
        os.fsync(fh.fileno())
    return attempt


def forget_enrollment_attempt(state_dir: Path) -> None:
    (Path(state_dir) / ENROLLMENT_ATTEMPT_FILE).unlink(missing_ok=True)
