"""A newcomer's Debian 12 in a container: the README's first command, run verbatim.

readme_first_command()  -> the first command line of README.md's opening sh block
python_image()          -> tests/infra/build-python-image.sh's tag (debootstrap minbase +
                           python3 + python3-venv + user `newcomer`; cached by tag)
wheelhouse()            -> a host directory of wheels for the project's dependencies and its
                           build requirements (downloaded once from PyPI, cached by their list)
source_tar()            -> the working tree (tracked and untracked, not ignored) as a tar
                           under faden-agent/, owned by the newcomer (uid 1000)
"""

from __future__ import annotations

import hashlib
import io
import subprocess
import sys
import tarfile
import tomllib
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
IMAGE_SCRIPT = REPO / "tests/infra/build-python-image.sh"
NEWCOMER_UID = 1000
WHEEL_CACHE = Path("/var/tmp")


def readme_first_command() -> str:
    """The first non-comment line of the README's first ```sh block (command 1)."""
    lines = (REPO / "README.md").read_text().splitlines()
    start = lines.index("```sh") + 1
    for line in lines[start:]:
        if line.startswith("```"):
            break
        if line.strip() and not line.lstrip().startswith("#"):
            return line.strip()
    raise AssertionError("README.md's first sh block has no command")


def python_image() -> str:
    done = subprocess.run(["bash", str(IMAGE_SCRIPT)], capture_output=True, text=True, timeout=900)
    if done.returncode != 0:
        raise AssertionError(f"building the python image failed:\n{done.stdout[-2000:]}\n{done.stderr[-3000:]}")
    return done.stdout.strip().splitlines()[-1]


def _requirements() -> list[str]:
    project = tomllib.loads((REPO / "pyproject.toml").read_text())
    return sorted(project["build-system"]["requires"] + project["project"]["dependencies"])


def wheelhouse() -> Path:
    """Wheels for Debian 12's Python 3.11 on this architecture: the container has no network,
    so its pip reads these (PIP_FIND_LINKS) instead of PyPI. The host is Debian 12 with the
    same Python minor, so the host's pip picks wheels the container can install."""
    import fcntl

    requirements = _requirements()
    key = hashlib.sha256("\n".join(requirements).encode()).hexdigest()[:12]
    target = WHEEL_CACHE / f"faden-newcomer-wheels-{key}"
    with open(WHEEL_CACHE / "faden-newcomer-wheels.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not (target / ".complete").exists():
            target.mkdir(exist_ok=True)
            done = subprocess.run(
                [
                    sys.executable,
                    "-m",
                    "pip",
                    "download",
                    "-q",
                    "--only-binary=:all:",
                    "--python-version",
                    "3.11",
                    "-d",
                    str(target),
                    *requirements,
                ],
                capture_output=True,
                text=True,
                timeout=600,
            )
            if done.returncode != 0:
                raise AssertionError(f"pip download of the wheelhouse failed:\n{done.stderr[-3000:]}")
            (target / ".complete").touch()
    return target


def source_tar() -> bytes:
    names = (
        subprocess.run(
            ["git", "ls-files", "-co", "--exclude-standard", "-z"], cwd=REPO, capture_output=True, check=True
        )
        .stdout.decode()
        .split("\0")
    )
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:

        def owned(info: tarfile.TarInfo) -> tarfile.TarInfo:
            info.uid = info.gid = NEWCOMER_UID
            info.uname = info.gname = "newcomer"
            return info

        top = tarfile.TarInfo("faden-agent")
        top.type, top.mode = tarfile.DIRTYPE, 0o755
        tar.addfile(owned(top))
        for name in filter(None, names):
            path = REPO / name
            if path.is_file() and not path.is_symlink():
                tar.add(path, arcname=f"faden-agent/{name}", recursive=False, filter=owned)
    return buf.getvalue()
