"""The third-party programs the tests run (Loki, Promtail, Docker Engine 29), pinned in
tests/infra/test-tools.toml: found in the project's builds beside the repository
(../shared/tools), else downloaded from their upstream releases and verified, into one cache
(FADEN_TEST_TOOLS_DIR) where the tests take them: `tool_path()`, or `require()` in a test.
Stdlib only: tests/infra/start-services.sh runs it (`python3 -m tests.support.testtools`)."""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import hashlib
import json
import lzma
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
import tomllib
import urllib.error
import urllib.request
import zipfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO

REPO = Path(__file__).resolve().parents[2]
LOCK = REPO / "tests/infra/test-tools.toml"
SHARED_ENV = "FADEN_TEST_SHARED_TOOLS"  # a folder laid out like ../shared/tools
CACHE_ENV = "FADEN_TEST_TOOLS_DIR"
MIRROR_ENV = "FADEN_TEST_TOOLS_MIRROR"  # BASE: fetch BASE/<host>/<path> instead of https://<host>/<path>
REQUIRE_ENV = "FADEN_TEST_REQUIRE_TOOLS"  # "1": a missing tool fails a test instead of skipping it
MISSING_FILE = "missing.json"  # in the cache: what the last `ensure` could not get, and why
SOURCE_FILE = "SOURCE"  # in each tool's folder: where its binaries came from
ARCHIVE_MAX_BYTES = 512 * 2**20  # the largest upstream archive pinned is about 70 MiB
SUMS_MAX_BYTES = 64 * 2**10
STALL_S = 30.0  # no byte for this long ends a download
DOWNLOAD_S = 900.0  # nor may one take longer in all
CHUNK = 1 << 20


class ToolUnavailable(RuntimeError):
    """A tool that could not be had here; str() says why, in one line."""


@dataclass(frozen=True)
class Binary:
    name: str
    member: str  # its path inside the upstream archive
    shared: str  # its xz file under ../shared/tools
    shared_sha256: str


@dataclass(frozen=True)
class Tool:
    name: str
    what: str
    url: str
    sha256: str  # of the upstream archive; "" where only `sums` checks it
    sums: str
    binaries: tuple[Binary, ...]
    optional: bool = False


def tools(lock: Path = LOCK) -> dict[str, Tool]:
    with open(lock, "rb") as fh:
        table = tomllib.load(fh)
    return {
        name: Tool(
            name=name,
            what=entry["what"],
            url=entry["url"],
            sha256=entry.get("sha256", ""),
            sums=entry.get("sums", ""),
            binaries=tuple(Binary(b, **fields) for b, fields in entry["binaries"].items()),
            optional=bool(entry.get("optional", False)),
        )
        for name, entry in table.items()
    }


def cache_dir() -> Path:
    if os.environ.get(CACHE_ENV):
        return Path(os.environ[CACHE_ENV])
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "faden-test-tools"


def ci() -> bool:
    return os.environ.get("CI", "").lower() in ("1", "true", "yes")


# ------------------------------------------------------------------ where the tests take them


def tool_path(name: str, binary: str | None = None) -> Path | None:
    """The cached binary (default: the tool's first), placed from ../shared first when it is
    there but not cached yet; None when neither has it (ensure() downloads)."""
    tool = tools()[name]
    wanted = binary or tool.binaries[0].name
    folder = cache_dir() / name
    if not folder.is_dir() and find_shared() is not None:
        with contextlib.suppress(ToolUnavailable):
            ensure(tool, download=False)
    path = folder / wanted
    return path if path.is_file() else None


def why_missing(name: str) -> str:
    """One line: why tool_path(name) is None, with the last download's failure if any."""
    last = read_missing().get(name)
    shared = find_shared()
    if shared:
        where = f"nor in {shared}"
    elif os.environ.get(SHARED_ENV):
        where = f"{SHARED_ENV}={os.environ[SHARED_ENV]} is no folder"
    else:
        where = "no ../shared/tools beside the repository"
    said = f"; the last download said: {last}" if last else ""
    return (
        f"{name} is not in {cache_dir()} ({where}){said}; "
        "run tests/infra/start-services.sh or `python3 -m tests.support.testtools` to fetch it"
    )


def require(name: str, binary: str | None = None) -> Path:
    """For a test: the binary, or skip naming why (fail instead under FADEN_TEST_REQUIRE_TOOLS=1)."""
    import pytest

    path = tool_path(name, binary)
    if path is not None:
        return path
    reason = why_missing(name)
    if os.environ.get(REQUIRE_ENV) == "1":
        pytest.fail(f"{name} is required here (CI) but missing: {reason}")
    pytest.skip(reason)


def find_shared() -> Path | None:
    """The project's builds: FADEN_TEST_SHARED_TOOLS, else ../shared/tools beside this
    checkout, beside the main checkout of this git worktree, or beside the checkout this one
    was cloned from (a clone into a temporary folder, as CI makes one)."""
    if os.environ.get(SHARED_ENV):
        named = Path(os.environ[SHARED_ENV])
        return named if named.is_dir() else None
    candidates = [REPO.parent]
    main_git = _git("rev-parse", "--path-format=absolute", "--git-common-dir")  # <main>/.git
    origin = _git("remote", "get-url", "origin")
    for checkout in (Path(main_git).parent if main_git else None, Path(origin) if origin else None):
        if checkout is not None and checkout.is_dir():
            candidates.append(checkout.resolve().parent)
    for parent in candidates:
        if (parent / "shared" / "tools").is_dir():
            return parent / "shared" / "tools"
    return None


def _git(*args: str) -> str:
    try:
        return subprocess.run(
            ["git", "-C", str(REPO), *args], capture_output=True, text=True, timeout=10
        ).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return ""


# ------------------------------------------------------------------ getting them


def ensure(tool: Tool, download: bool = True, mirror: str | None = None) -> str:
    """Place `tool` in the cache (nothing to do when it is there); returns where it came
    from, or raises ToolUnavailable. One process at a time per tool (a lock file)."""
    root = cache_dir()
    root.mkdir(parents=True, exist_ok=True)
    folder = root / tool.name
    with _locked(root / f".{tool.name}.lock"):
        if folder.is_dir():
            return (folder / SOURCE_FILE).read_text().strip() if (folder / SOURCE_FILE).exists() else "cache"
        staging = Path(tempfile.mkdtemp(prefix=f".{tool.name}.", dir=root))
        try:
            source = _from_shared(tool, staging)
            if source is None:
                if not download:
                    raise ToolUnavailable(f"{tool.name}: not in ../shared/tools and not downloaded")
                source = _from_upstream(tool, staging, mirror)
            (staging / SOURCE_FILE).write_text(source + "\n")
            staging.chmod(0o755)
            os.rename(staging, folder)
        finally:
            shutil.rmtree(staging, ignore_errors=True)
    return source


def _from_shared(tool: Tool, staging: Path) -> str | None:
    shared = find_shared()
    if shared is None or not all((shared / b.shared).is_file() for b in tool.binaries):
        return None
    for binary in tool.binaries:
        packed = shared / binary.shared
        _verify(packed, binary.shared_sha256, str(packed))
        with lzma.open(packed) as src:
            _write_executable(src, staging / binary.name)
    return f"{shared} (the project's builds, SHA-256 as pinned)"


def _from_upstream(tool: Tool, staging: Path, mirror: str | None) -> str:
    url = mirrored(tool.url, mirror)
    archive = staging / ".archive"
    _download(url, archive, ARCHIVE_MAX_BYTES)
    if tool.sha256:
        _verify(archive, tool.sha256, url)
        checked = "the SHA-256 pinned in tests/infra/test-tools.toml"
    else:
        sums_url = mirrored(tool.sums, mirror)
        sums = staging / ".sums"
        _download(sums_url, sums, SUMS_MAX_BYTES)
        _verify(archive, published_sha256(sums.read_text(errors="replace"), tool.url, sums_url), url)
        checked = f"the checksum published beside it ({sums_url})"
    for binary in tool.binaries:
        with _member(archive, binary.member, url) as src:
            _write_executable(src, staging / binary.name)
    archive.unlink()
    return f"{url} (verified against {checked})"


def mirrored(url: str, mirror: str | None) -> str:
    """`url`, or under MIRROR the same path below the mirror's base: BASE/<host>/<path>."""
    base = mirror if mirror is not None else os.environ.get(MIRROR_ENV, "")
    return f"{base.rstrip('/')}/{url.split('://', 1)[1]}" if base else url


def published_sha256(text: str, url: str, sums_url: str) -> str:
    """The hash `sha256sum` format gives for the archive's file name (`HASH  NAME` or `HASH *NAME`)."""
    name = url.rsplit("/", 1)[-1]
    for line in text.splitlines():
        fields = line.split()
        if len(fields) >= 2 and fields[1].lstrip("*").rsplit("/", 1)[-1] == name:
            return fields[0].lower()
        if len(fields) == 1 and sums_url.endswith(f"{name}.sha256"):  # a lone hash in NAME.sha256
            return fields[0].lower()
    raise ToolUnavailable(f"{sums_url} names no checksum for {name}")


def _download(url: str, dest: Path, max_bytes: int) -> None:
    """`url` into `dest`: at most `max_bytes`, no stall over STALL_S, done within DOWNLOAD_S."""
    deadline = time.monotonic() + DOWNLOAD_S
    try:
        with urllib.request.urlopen(url, timeout=STALL_S) as answer, open(dest, "wb") as out:
            got = 0
            while chunk := answer.read(CHUNK):
                got += len(chunk)
                if got > max_bytes:
                    raise ToolUnavailable(f"download of {url} stopped: more than {max_bytes} bytes")
                if time.monotonic() > deadline:
                    raise ToolUnavailable(f"download of {url} stopped: not done within {DOWNLOAD_S:.0f}s")
                out.write(chunk)
    except (urllib.error.URLError, OSError, ValueError) as exc:
        reason = getattr(exc, "reason", None) or exc
        raise ToolUnavailable(f"download of {url} failed: {reason}") from None


def _verify(path: Path, expected: str, what: str) -> None:
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        while chunk := fh.read(CHUNK):
            digest.update(chunk)
    if digest.hexdigest() != expected.lower():
        raise ToolUnavailable(f"checksum mismatch for {what}: expected {expected}, got {digest.hexdigest()}")


@contextlib.contextmanager
def _member(archive: Path, member: str, url: str) -> Iterator[IO[bytes]]:
    """One regular file of a verified zip or tar.gz, streamed."""
    if url.endswith(".zip"):
        with zipfile.ZipFile(archive) as zf:
            try:
                info = zf.getinfo(member)
            except KeyError:
                raise ToolUnavailable(f"{url} has no {member}") from None
            with zf.open(info) as src:
                yield src
        return
    with tarfile.open(archive, "r:gz") as tf:
        try:
            info = tf.getmember(member)
        except KeyError:
            raise ToolUnavailable(f"{url} has no {member}") from None
        src = tf.extractfile(info) if info.isfile() else None
        if src is None:
            raise ToolUnavailable(f"{member} in {url} is not a regular file")
        with src:
            yield src


def _write_executable(src: IO[bytes], dest: Path) -> None:
    with open(dest, "wb") as out:
        shutil.copyfileobj(src, out, CHUNK)
    dest.chmod(0o755)


@contextlib.contextmanager
def _locked(path: Path) -> Iterator[None]:
    with open(path, "a") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        yield


def read_missing() -> dict[str, str]:
    try:
        found = json.loads((cache_dir() / MISSING_FILE).read_text())
    except (OSError, ValueError):
        return {}
    return found if isinstance(found, dict) else {}


# ------------------------------------------------------------------ a mirror of the project's builds


def write_mirror(dest: Path, names: list[str]) -> None:
    """Lay out `names` as their upstream release paths below `dest` (serve it over HTTP and
    point FADEN_TEST_TOOLS_MIRROR at it), made from the cached binaries: archives of the
    upstream's shape and a checksum file of what is really there (not upstream's bytes)."""
    for name in names:
        tool = tools()[name]
        archive = dest / tool.url.split("://", 1)[1]
        archive.parent.mkdir(parents=True, exist_ok=True)
        if tool.url.endswith(".zip"):
            with zipfile.ZipFile(archive, "w", zipfile.ZIP_STORED) as zf:
                for binary in tool.binaries:
                    zf.write(_cached(tool, binary), binary.member)
        else:
            with tarfile.open(archive, "w:gz", compresslevel=1) as tf:
                for binary in tool.binaries:
                    tf.add(_cached(tool, binary), binary.member)
        digest = hashlib.sha256(archive.read_bytes()).hexdigest()
        sums = dest / tool.sums.split("://", 1)[1]
        others = sums.read_text().splitlines() if sums.exists() else []  # a SHA256SUMS names several files
        kept = [line for line in others if line.split()[1:2] != [archive.name]]
        sums.write_text("".join(f"{line}\n" for line in [*kept, f"{digest}  {archive.name}"]))


def _cached(tool: Tool, binary: Binary) -> Path:
    path = tool_path(tool.name, binary.name)
    if path is None:
        raise ToolUnavailable(why_missing(tool.name))
    return path


# ------------------------------------------------------------------ command line


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python3 -m tests.support.testtools", description=__doc__)
    sub = parser.add_subparsers(dest="action")
    get = sub.add_parser("ensure", help="place the tools in the cache (the default action)")
    get.add_argument("names", nargs="*", help="tools to place (default: every one the tests need)")
    sub.add_parser("report", help="name the tools the last `ensure` could not get, and what that leaves out")
    mirror = sub.add_parser("mirror", help="lay out a mirror of the cached tools under DIR")
    mirror.add_argument("dir", type=Path)
    mirror.add_argument("names", nargs="*")
    args = parser.parse_args(argv)
    if args.action == "report":
        return report()
    if args.action == "mirror":
        write_mirror(args.dir, args.names or list(tools()))
        return 0
    return ensure_all(getattr(args, "names", None) or [t.name for t in tools().values() if not t.optional])


def ensure_all(names: list[str]) -> int:
    """Place every tool named; 1 when one the tests need is missing under CI, else 0."""
    known = tools()
    unknown = [n for n in names if n not in known]
    if unknown:
        print(f"test tools: unknown {', '.join(unknown)} (known: {', '.join(known)})", file=sys.stderr)
        return 2
    missing = {n: v for n, v in read_missing().items() if n not in names}
    for name in names:
        try:
            print(f"test tools: {name} from {ensure(known[name])}")
        except ToolUnavailable as exc:
            missing[name] = str(exc)
            print(f"test tools: {name} MISSING: {exc}", file=sys.stderr)
    (cache_dir() / MISSING_FILE).write_text(json.dumps(missing, indent=1) + "\n")
    needed = [n for n in missing if n in names and not known[n].optional]
    if needed and ci():
        print(f"test tools: CI=true and {', '.join(needed)} missing: failing", file=sys.stderr)
        return 1
    return 0


def report() -> int:
    """What the run could not test here: one line per missing tool (printed by .ci/run last)."""
    known = tools()
    for name, why in read_missing().items():
        if name in known:
            print(f"not run here: what needs {known[name].what}: {why}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
