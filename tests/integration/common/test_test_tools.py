"""The tests' third-party programs on a checkout with no ../shared beside it (what a clone
gets): `python3 -m tests.support.testtools` (run by tests/infra/start-services.sh) downloads
them from their upstream release paths, here below a local mirror (python -m http.server on
loopback) holding one tool, Loki 2.8.0, in the upstream's shape (a zip and SHA256SUMS).
Verified or refused; outside CI a tool that cannot be had is named, under CI=true it fails."""

from __future__ import annotations

import hashlib
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import requests

from tests.support import testtools
from tests.support.agentproc import free_port, wait_for

TOOL = "loki-2.8.0"
ARCHIVE = "github.com/grafana/loki/releases/download/v2.8.0/loki-linux-amd64.zip"
SUMS = "github.com/grafana/loki/releases/download/v2.8.0/SHA256SUMS"
CHECKOUT_FILES = (
    "tests/__init__.py",
    "tests/support/__init__.py",
    "tests/support/testtools.py",
    "tests/infra/test-tools.toml",
)


@pytest.fixture(scope="module")
def mirror(tmp_path_factory):
    """An HTTP server on loopback serving Loki 2.8.0 as github.com lays it out; (url, root, requests log)."""
    testtools.require(TOOL)
    root = tmp_path_factory.mktemp("mirror")
    testtools.write_mirror(root, [TOOL])
    port = free_port()
    log = open(root.parent / "mirror.log", "w+")
    server = subprocess.Popen(
        [sys.executable, "-m", "http.server", str(port), "--bind", "127.0.0.1", "--directory", str(root)],
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        wait_for(lambda: _answers(url), 20, what="the mirror's http.server")
        yield url, root, Path(log.name)
    finally:
        server.terminate()
        server.wait(10)
        log.close()


def _answers(url: str) -> bool:
    try:
        return requests.get(url, timeout=2).status_code == 200
    except requests.RequestException:
        return False


@pytest.fixture
def checkout(tmp_path) -> Path:
    """The files the fetcher needs, in a folder with no ../shared beside it and no git around it."""
    root = tmp_path / "clone"
    for name in CHECKOUT_FILES:
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(testtools.REPO / name, root / name)
    assert not (tmp_path / "shared").exists()
    return root


def fetch(checkout: Path, *args: str, **env: str) -> subprocess.CompletedProcess:
    base = {
        "PATH": "/usr/bin:/bin",
        "HOME": str(checkout.parent),
        testtools.CACHE_ENV: str(checkout.parent / "cache"),
    }
    return subprocess.run(
        [sys.executable, "-m", "tests.support.testtools", *args],
        cwd=checkout,
        env={**base, **env},
        capture_output=True,
        text=True,
        timeout=300,
    )


def test_a_checkout_without_shared_gets_the_tool_from_the_mirror_verified(checkout, mirror):
    url, root, log = mirror
    done = fetch(checkout, "ensure", TOOL, FADEN_TEST_TOOLS_MIRROR=url)
    assert done.returncode == 0, done.stderr
    assert f"{TOOL} from {url}/{ARCHIVE} (verified against the checksum published beside it ({url}/{SUMS}))" in (
        done.stdout
    )
    binary = checkout.parent / "cache" / TOOL / "loki"
    served = testtools.tool_path(TOOL)
    assert served is not None
    assert hashlib.sha256(binary.read_bytes()).digest() == hashlib.sha256(served.read_bytes()).digest()
    version = subprocess.run([str(binary), "-version"], capture_output=True, text=True, timeout=60)
    assert "loki, version 2.8.0" in version.stdout + version.stderr
    fetched = [line for line in log.read_text().splitlines() if '"GET /' in line and "/github.com/" in line]
    assert sorted(line.split('"GET ')[1].split()[0] for line in fetched) == [f"/{SUMS}", f"/{ARCHIVE}"]

    again = fetch(checkout, "ensure", TOOL, FADEN_TEST_TOOLS_MIRROR=url)  # cached: nothing fetched
    assert again.returncode == 0 and "verified against" in again.stdout, again.stderr
    assert len([line for line in log.read_text().splitlines() if "/github.com/" in line]) == len(fetched)


def test_a_mirror_whose_file_does_not_match_its_checksum_places_nothing(checkout, mirror, tmp_path):
    url, root, _ = mirror
    sums = root / SUMS
    honest = sums.read_text()
    sums.write_text(f"{'0' * 64}  loki-linux-amd64.zip\n")
    try:
        done = fetch(checkout, "ensure", TOOL, FADEN_TEST_TOOLS_MIRROR=url)
        in_ci = fetch(checkout, "ensure", TOOL, FADEN_TEST_TOOLS_MIRROR=url, CI="true")
    finally:
        sums.write_text(honest)
    actual = hashlib.sha256((root / ARCHIVE).read_bytes()).hexdigest()
    said = f"checksum mismatch for {url}/{ARCHIVE}: expected {'0' * 64}, got {actual}"
    assert done.returncode == 0 and said in done.stderr, done.stderr  # outside CI: named, not an error
    assert in_ci.returncode == 1 and said in in_ci.stderr and "CI=true" in in_ci.stderr
    assert not (checkout.parent / "cache" / TOOL).exists()
    assert sorted(p.name for p in (checkout.parent / "cache").iterdir() if not p.name.startswith(".")) == [
        testtools.MISSING_FILE
    ]
    report = fetch(checkout, "report")
    assert report.stdout.startswith("not run here: what needs Grafana Loki 2.8.0 (the real-Loki log tests): ")
    assert said in report.stdout


def test_with_nothing_reachable_the_run_names_what_it_skips_and_only_ci_fails(checkout):
    closed = f"http://127.0.0.1:{free_port()}"
    done = fetch(checkout, "ensure", FADEN_TEST_TOOLS_MIRROR=closed)
    assert done.returncode == 0, done.stderr
    needed = [t.name for t in testtools.tools().values() if not t.optional]
    for name in needed:
        assert f"test tools: {name} MISSING: download of {closed}/" in done.stderr
    report = fetch(checkout, "report").stdout.splitlines()
    assert len(report) == len(needed) and all(line.startswith("not run here: what needs ") for line in report)
    assert "Docker Engine 29.1.5" in "\n".join(report)
    in_ci = fetch(checkout, "ensure", FADEN_TEST_TOOLS_MIRROR=closed, CI="true")
    assert in_ci.returncode == 1 and f"CI=true and {', '.join(needed)} missing" in in_ci.stderr
