"""packaging/install.sh run by a real /bin/sh (dash) with stand-ins for what it talks to:
a `curl` on PATH that serves files from a directory and notes its arguments, and builds
that are small shell scripts noting every `start` (a service action) they are asked for.
The same script with the real systemd and real builds: tests/integration/service/test_systemd_e2e.py.

- truncated at every line boundary (a download cut short), it changes nothing: no file in
  the install directory changes, no service is (re)started (cut after its `mv` line, it
  would install the new build, never start it, and exit 0);
- https only unless FADEN_AGENT_ALLOW_HTTP=1; FADEN_NODE_AGENT_CA_BUNDLE reaches curl;
- a new build that does not get connected is rolled back, and the installer says so;
- with the real curl: an endless server writes no more than the size it announced (the
  installer stops it), or than the fixed cap when it announces none, and a stalled one ends
  with a clear message instead of a wait without end; each time the old build is untouched;
- the upgrade guide's offline folder (the builds and their .sha256, nothing else) served by
  the real reference backend installs, and the installer says which version the backend
  expects (GET /api/agent/v1/expected-version) and when the server's build is another one;
- an older build never replaces a newer one unless FADEN_AGENT_ALLOW_DOWNGRADE=1, and both
  versions are named;
- run as a user where the agent is the system service, or as root where it is a user's
  service, it stops before anything with the command to run instead (a private mount
  namespace puts the unit and the accounts in place; setpriv makes the user).
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import tempfile
import threading
from http.server import BaseHTTPRequestHandler
from pathlib import Path

import pytest

from tests.support.backendproc import BackendProcess
from tests.support.scriptedhttp import LocalHTTP

REPO = Path(__file__).resolve().parents[3]
SCRIPT = REPO / "packaging/install.sh"
ARCH = "x86_64" if os.uname().machine in ("x86_64", "amd64") else "aarch64"
NAME = f"faden-agent-linux-{ARCH}"
BUILD_CAP = 268435456  # install.sh's build_max: a build without .size, and the most a .size may say

FAKE_CURL = """#!/bin/sh
echo "$*" >> "{log}"
out=""; url=""
while [ $# -gt 0 ]; do
  case "$1" in
    -o) out=$2; shift ;;
    --proto|--proto-redir|--retry|--retry-max-time|--connect-timeout|--cacert) shift ;;
    --max-time|--speed-limit|--speed-time) shift ;;
    -*) ;;
    *) url=$1 ;;
  esac
  shift
done
[ -f "{served}/${{url##*/}}" ] || exit 22  # what curl -f says of a 404
if [ -n "$out" ]; then cp "{served}/${{url##*/}}" "$out"; else cat "{served}/${{url##*/}}"; fi
"""

FAKE_BUILD = """#!/bin/sh
# faden-agent standalone build {version} ({arch})
case "$1" in
  --version) echo "faden-agent {version}" ;;
  start) echo "start {version}" >> "{log}" ;;
  ps) echo '{{"supervisor": {{"version": "{version}"}}}}' ;;
  status) [ "{connects}" = yes ] ;;
esac
"""


class Sandbox:
    def __init__(self, root: Path):
        self.root = root
        self.path_dir, self.served, self.install = root / "path", root / "served", root / "install"
        for d in (self.path_dir, self.served, self.install):
            d.mkdir()
        self.curl_log, self.service_log = root / "curl.log", root / "service.log"
        curl = self.path_dir / "curl"
        curl.write_text(FAKE_CURL.format(log=self.curl_log, served=self.served))
        curl.chmod(0o755)

    def build(self, version: str, connects: bool = True, arch: str = ARCH) -> str:
        return FAKE_BUILD.format(version=version, arch=arch, log=self.service_log, connects="yes" if connects else "no")

    def serve(self, text: str, name: str = NAME, size: bool = True) -> None:
        (self.served / name).write_text(text)
        digest = hashlib.sha256(text.encode()).hexdigest()
        (self.served / f"{name}.sha256").write_text(f"{digest}  {name}\n")
        if size:
            (self.served / f"{name}.size").write_text(f"{len(text.encode())}\n")

    def install_old(self, text: str) -> None:
        target = self.install / "faden-agent"
        target.write_text(text)
        target.chmod(0o755)

    def env(self, **extra: str) -> dict[str, str]:
        return {
            "PATH": f"{self.path_dir}:/usr/bin:/bin",
            "HOME": str(self.root),
            "FADEN_NODE_AGENT_BACKEND_URL": "https://backend.invalid",
            "FADEN_AGENT_INSTALL_DIR": str(self.install),
            "FADEN_AGENT_INSTALL_WAIT_SEC": "2",
            **extra,
        }

    def run(self, script: str, **extra: str) -> subprocess.CompletedProcess:
        return subprocess.run(
            ["/bin/sh"], input=script, env=self.env(**extra), capture_output=True, text=True, timeout=60
        )

    def snapshot(self) -> dict[str, bytes]:
        return {p.name: p.read_bytes() for p in sorted(self.install.iterdir())}

    def services(self) -> str:
        return self.service_log.read_text() if self.service_log.exists() else ""


@pytest.fixture
def box(tmp_path) -> Sandbox:
    return Sandbox(tmp_path)


def test_truncated_at_every_line_boundary_it_changes_nothing(box):
    box.install_old(box.build("1.0.0"))
    box.serve(box.build("2.0.0"))
    lines = SCRIPT.read_text().splitlines(keepends=True)
    before = box.snapshot()
    for cut in range(len(lines)):  # every proper prefix: 0 .. n-1 whole lines
        done = box.run("".join(lines[:cut]))
        assert box.snapshot() == before, f"cut after line {cut} changed the install directory: {done.stderr}"
        assert box.services() == "", f"cut after line {cut} started a service: {done.stderr}"
    # The whole script does install (so the loop above could have seen a change).
    done = box.run("".join(lines))
    assert done.returncode == 0, done.stderr
    assert (box.install / "faden-agent").read_text() == box.build("2.0.0")
    assert box.services() == "start 2.0.0\n"
    assert sorted(box.snapshot()) == ["faden-agent"]  # no temporary or previous copy left


def test_https_is_required_unless_allowed_and_the_ca_bundle_reaches_curl(box, tmp_path):
    box.serve(box.build("2.0.0"))
    http = box.run(SCRIPT.read_text(), FADEN_NODE_AGENT_BACKEND_URL="http://backend.invalid")
    assert http.returncode != 0 and "is not https" in http.stderr and "FADEN_AGENT_ALLOW_HTTP=1" in http.stderr
    assert not box.curl_log.exists() and box.snapshot() == {}
    redirect = box.run(SCRIPT.read_text(), FADEN_AGENT_DOWNLOAD_URL="http://mirror.invalid/dl")
    assert (
        redirect.returncode != 0 and "FADEN_AGENT_DOWNLOAD_URL=http://mirror.invalid/dl is not https" in redirect.stderr
    )

    ca = tmp_path / "ca.pem"
    ca.write_text("-----BEGIN CERTIFICATE-----\n")
    done = box.run(SCRIPT.read_text(), FADEN_NODE_AGENT_CA_BUNDLE=str(ca))
    assert done.returncode == 0, done.stderr
    calls = box.curl_log.read_text().splitlines()
    assert len(calls) == 4 and all(f"--cacert {ca}" in c and "--proto =https --proto-redir =https" in c for c in calls)
    assert "https://backend.invalid/api/agent/v1/expected-version?arch=" in calls[-1]

    missing = box.run(SCRIPT.read_text(), FADEN_NODE_AGENT_CA_BUNDLE=str(tmp_path / "nope.pem"))
    assert missing.returncode != 0 and "no readable file" in missing.stderr

    allowed = box.run(
        SCRIPT.read_text(), FADEN_NODE_AGENT_BACKEND_URL="http://backend.invalid", FADEN_AGENT_ALLOW_HTTP="1"
    )
    assert allowed.returncode == 0, allowed.stderr
    assert "--proto =http,https" in box.curl_log.read_text().splitlines()[-1]


def test_a_new_build_that_does_not_connect_is_rolled_back(box):
    old = box.build("1.0.0")
    box.install_old(old)
    box.serve(box.build("2.0.0", connects=False))
    done = box.run(SCRIPT.read_text())
    assert done.returncode != 0
    assert (
        "faden-agent 2.0.0 did not connect to https://backend.invalid within 2s; rolling back to faden-agent 1.0.0"
        in done.stderr
    )
    assert "rolled back: faden-agent 1.0.0 runs again" in done.stderr
    assert (box.install / "faden-agent").read_text() == old
    assert box.services() == "start 2.0.0\nstart 1.0.0\n"  # the new one was started, then the old one again
    assert sorted(box.snapshot()) == ["faden-agent"]


class BuildServer(LocalHTTP):
    """Serves NAME.sha256 and NAME.size of `build` like a backend, and then NAME itself as
    `mode` says: "endless" (zeros, no Content-Length, until the client goes) or "stalled"
    (headers, then silence). Counts the bytes of the build it got out."""

    def __init__(self, build: bytes, mode: str, with_size: bool = True):
        self.build, self.mode, self.sent, self.with_size = build, mode, 0, with_size
        self.release = threading.Event()
        super().__init__()

    def _handler(self):
        server = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                name = self.path.rsplit("/", 1)[-1]
                small = {
                    f"{NAME}.sha256": f"{hashlib.sha256(server.build).hexdigest()}  {NAME}\n".encode(),
                    f"{NAME}.size": f"{len(server.build)}\n".encode(),
                }
                if name == f"{NAME}.size" and not server.with_size:
                    self.send_error(404)
                    return
                if name in small:
                    self.send_response(200)
                    self.send_header("Content-Length", str(len(small[name])))
                    self.end_headers()
                    self.wfile.write(small[name])
                    return
                self.send_response(200)
                self.end_headers()
                self.wfile.flush()
                if server.mode == "stalled":
                    server.release.wait(60)
                    return
                chunk = b"\0" * 65536
                try:
                    while True:
                        self.wfile.write(chunk)
                        server.sent += len(chunk)
                except OSError:
                    return

            def log_message(self, *args: object) -> None:
                pass

        return Handler


def real_curl(box: Sandbox, server_url: str, **extra: str) -> dict[str, str]:
    (box.path_dir / "curl").unlink()  # the real one in /usr/bin from here on
    return {
        "FADEN_NODE_AGENT_BACKEND_URL": server_url,
        "FADEN_AGENT_ALLOW_HTTP": "1",
        "FADEN_AGENT_DOWNLOAD_STALL_SEC": "2",
        "FADEN_AGENT_DOWNLOAD_TIMEOUT_SEC": "20",
        **extra,
    }


def test_an_endless_server_writes_no_more_than_the_announced_size(box):
    box.install_old(box.build("1.0.0"))
    before = box.snapshot()
    build = box.build("2.0.0").encode()
    server = BuildServer(build, "endless")
    try:
        done = box.run(SCRIPT.read_text(), **real_curl(box, server.url))
    finally:
        server.close()
    assert done.returncode != 0
    assert f"the server sent more than the {len(build)} bytes it announced in {NAME}.size" in done.stderr, done.stderr
    assert "the installed build (faden-agent 1.0.0) is unchanged and keeps running" in done.stderr
    assert box.snapshot() == before and box.services() == ""  # no temporary file left either
    # What the server got out before curl saw the pipe close: socket buffers, not gigabytes.
    print(f"endless server: {server.sent} bytes sent for a {len(build)}-byte build")
    assert server.sent < 64 * 2**20


def test_a_stalled_server_ends_the_download_with_a_clear_message(box):
    box.install_old(box.build("1.0.0"))
    before = box.snapshot()
    server = BuildServer(box.build("2.0.0").encode(), "stalled")
    try:
        done = box.run(SCRIPT.read_text(), **real_curl(box, server.url))
    finally:
        server.release.set()
        server.close()
    assert done.returncode != 0
    assert f"download of {server.url}/downloads/{NAME} timed out: no data for 2s" in done.stderr, done.stderr
    assert "the installed build (faden-agent 1.0.0) is unchanged and keeps running" in done.stderr
    assert box.snapshot() == before and box.services() == ""


def test_without_a_size_file_the_build_installs_and_a_bad_one_still_refuses(box):
    box.install_old(box.build("1.0.0"))
    box.serve(box.build("2.0.0"), size=False)
    done = box.run(SCRIPT.read_text())
    assert done.returncode == 0, done.stderr
    assert (
        f"no {NAME}.size on the server: the download is bounded by {BUILD_CAP} bytes and checked against {NAME}.sha256"
        in done.stderr
    )
    assert (box.install / "faden-agent").read_text() == box.build("2.0.0") and box.services() == "start 2.0.0\n"

    box.install_old(box.build("1.0.0"))
    before = box.snapshot()
    (box.served / f"{NAME}.size").write_text("12 MiB\n")
    done = box.run(SCRIPT.read_text())
    assert done.returncode != 0 and f"{NAME}.size from https://backend.invalid/downloads is not a number" in done.stderr
    (box.served / f"{NAME}.size").write_text("9" * 19 + "\n")  # beyond what sh arithmetic takes
    done = box.run(SCRIPT.read_text())
    assert done.returncode != 0 and "more than any build" in done.stderr
    (box.served / f"{NAME}.size").write_text(f"{BUILD_CAP + 1}\n")
    done = box.run(SCRIPT.read_text())
    assert done.returncode != 0 and f"says {BUILD_CAP + 1} bytes: more than any build ({BUILD_CAP})" in done.stderr
    (box.served / f"{NAME}.sha256").write_text(f"{'0' * 64}  {NAME}\n")
    (box.served / f"{NAME}.size").unlink()
    done = box.run(SCRIPT.read_text())  # no size: the checksum still checks the download
    assert done.returncode != 0 and f"checksum mismatch for {NAME}" in done.stderr
    assert box.snapshot() == before and box.services() == "start 2.0.0\n"


def test_without_a_size_file_an_endless_server_writes_no_more_than_the_cap(box):
    box.install_old(box.build("1.0.0"))
    before = box.snapshot()
    server = BuildServer(box.build("2.0.0").encode(), "endless", with_size=False)
    try:
        done = box.run(SCRIPT.read_text(), **real_curl(box, server.url, FADEN_AGENT_DOWNLOAD_TIMEOUT_SEC="60"))
    finally:
        server.close()
    assert done.returncode != 0
    assert (
        f"the server sent more than the {BUILD_CAP} bytes a build may have (no {NAME}.size on the server)"
        in done.stderr
    ), done.stderr
    assert box.snapshot() == before and box.services() == ""
    print(f"endless server, no size: {server.sent} bytes sent against the {BUILD_CAP}-byte cap")
    assert server.sent < BUILD_CAP + 64 * 2**20


@pytest.mark.parametrize(
    "installed, served",
    [("2.0.0", "1.0.0"), ("0.10.0", "0.9.0"), ("0.1.0.post1", "0.1.0"), ("0.1.0+b2", "0.1.0+b1")],
)
def test_an_older_build_does_not_replace_a_newer_one_unless_allowed(box, installed, served):
    box.install_old(box.build(installed))
    before = box.snapshot()
    box.serve(box.build(served))
    done = box.run(SCRIPT.read_text())
    assert done.returncode != 0
    assert (
        f"the server's build is faden-agent {served}, older than the installed faden-agent {installed}: not installed"
        f" (set FADEN_AGENT_ALLOW_DOWNGRADE=1 to go back to it); the installed build (faden-agent {installed})"
        " is unchanged and keeps running" in done.stderr
    ), done.stderr
    assert box.snapshot() == before and box.services() == ""

    allowed = box.run(SCRIPT.read_text(), FADEN_AGENT_ALLOW_DOWNGRADE="1")
    assert allowed.returncode == 0, allowed.stderr
    assert f"going back from faden-agent {installed} to the older faden-agent {served}" in allowed.stderr
    assert (box.install / "faden-agent").read_text() == box.build(served) and box.services() == f"start {served}\n"


@pytest.mark.parametrize("installed, served", [("0.9.0", "0.10.0"), ("0.1.0", "0.1.0.post1"), ("1.0.0", "1.0.0")])
def test_a_newer_or_the_same_build_installs_as_before(box, installed, served):
    box.install_old(box.build(installed))
    box.serve(box.build(served))
    done = box.run(SCRIPT.read_text())
    assert done.returncode == 0, done.stderr
    assert "older" not in done.stderr and box.services() == f"start {served}\n"


# ---------------------------------------------------------------------- the upgrade guide's offline folder


@pytest.fixture
def offline_backend(box, tmp_path):
    """The real reference backend serving the folder the upgrade guide lists: both builds
    and their .sha256, nothing else (no .size, no install.sh)."""
    for arch in ("x86_64", "aarch64"):
        box.serve(box.build("2.0.0", arch=arch), name=f"faden-agent-linux-{arch}", size=False)
    assert sorted(p.name for p in box.served.iterdir()) == [
        "faden-agent-linux-aarch64",
        "faden-agent-linux-aarch64.sha256",
        "faden-agent-linux-x86_64",
        "faden-agent-linux-x86_64.sha256",
    ]
    backend = BackendProcess(tmp_path / "backend", tmp_path / "backend.log", downloads=box.served)
    backend.start()
    yield backend
    backend.stop()


def test_the_offline_folder_of_the_guide_installs_and_the_expected_version_is_reported(box, offline_backend):
    box.install_old(box.build("1.0.0"))
    env = real_curl(box, offline_backend.url)
    done = box.run(SCRIPT.read_text(), **env)
    assert done.returncode == 0, done.stderr
    assert f"no {NAME}.size on the server: the download is bounded by {BUILD_CAP} bytes" in done.stderr
    assert "the backend expects faden-agent 2.0.0: the server's build is that one" in done.stderr
    assert "faden-agent 2.0.0 runs instead of faden-agent 1.0.0" in done.stderr
    assert (box.install / "faden-agent").read_text() == box.build("2.0.0")

    offline_backend.admin.expect(version="2.1.0")  # the backend now expects a build the folder lacks
    box.install_old(box.build("1.0.0"))
    done = box.run(SCRIPT.read_text(), **env)
    assert done.returncode == 0, done.stderr
    assert (
        "the backend expects faden-agent 2.1.0, but the server's build is faden-agent 2.0.0:"
        " put the 2.1.0 builds in the server's agent-binaries folder" in done.stderr
    )


def test_the_expected_version_needs_no_credential_and_names_only_known_arches(offline_backend):
    import requests

    url = f"{offline_backend.url}/api/agent/v1/expected-version"
    answer = requests.get(url, params={"arch": "aarch64"}, timeout=10)
    assert answer.status_code == 200 and answer.json() == {"arch": "aarch64", "version": "2.0.0"}
    bad = requests.get(url, params={"arch": "../x"}, timeout=10)
    assert bad.status_code == 400 and "arch must be one of x86_64, aarch64" in bad.text


# ---------------------------------------------------------------------- one agent per machine

SYSTEM_UNITS = "/etc/systemd/system"
SETPRIV_NOBODY = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"]


def in_namespace(mounts: dict[str, Path], script: str, env: dict[str, str], user: list[str]):
    """The installer in a private mount namespace where `mounts` (target -> source) are bound,
    as `user` (a setpriv prefix, or [] for root)."""
    binds = " && ".join(f"mount --bind {source} {target}" for target, source in mounts.items())
    argv = ["unshare", "--mount", "--propagation", "private", "--", "sh", "-c", f'{binds} && exec "$@"', "sh"]
    return subprocess.run([*argv, *user, "/bin/sh"], input=script, env=env, capture_output=True, text=True, timeout=60)


@pytest.fixture
def nobody_home():
    """A home the user `nobody` owns, outside pytest's root-only temporary folders."""
    home = Path(tempfile.mkdtemp(prefix="faden-install-nobody-"))
    home.chmod(0o755)
    os.chown(home, 65534, 65534)  # empty: the first run must leave it so
    yield home
    shutil.rmtree(home, ignore_errors=True)


def test_as_a_user_where_the_agent_is_the_system_service_it_names_the_root_command(box, tmp_path, nobody_home):
    units = tmp_path / "units"
    units.mkdir()
    (units / "faden-agent.service").write_text("[Service]\nExecStart=/usr/local/bin/faden-agent run\n")
    env = {**box.env(), "HOME": str(nobody_home)}
    env.pop("FADEN_AGENT_INSTALL_DIR")
    done = in_namespace({SYSTEM_UNITS: units}, SCRIPT.read_text(), env, SETPRIV_NOBODY)
    assert done.returncode == 1
    assert done.stderr == (
        "faden-agent install: an agent runs here as the system service"
        " (/etc/systemd/system/faden-agent.service); run the install line as root instead:"
        " curl -fsSL https://backend.invalid/downloads/install.sh"
        " | sudo FADEN_NODE_AGENT_BACKEND_URL=https://backend.invalid sh\n"
    )
    assert not box.curl_log.exists() and list(nobody_home.iterdir()) == []

    (units / "faden-agent.service").unlink()  # no system service: the user's own install goes on
    (nobody_home / "box").mkdir()
    own = Sandbox(nobody_home / "box")  # its stand-ins where nobody reaches them
    own.serve(own.build("2.0.0"))
    subprocess.run(["chown", "-R", "65534:65534", str(nobody_home)], check=True)
    env = {**own.env(), "HOME": str(nobody_home)}
    env.pop("FADEN_AGENT_INSTALL_DIR")
    done = in_namespace({SYSTEM_UNITS: units}, SCRIPT.read_text(), env, SETPRIV_NOBODY)
    assert done.returncode == 0, done.stderr
    assert (nobody_home / ".local/bin/faden-agent").read_text() == own.build("2.0.0")


def test_as_root_where_only_a_user_service_runs_it_names_that_users_command(box, tmp_path):
    units, home = tmp_path / "units", tmp_path / "home" / "alice"
    units.mkdir()
    (home / ".config/systemd/user").mkdir(parents=True)
    (home / ".config/systemd/user/faden-agent.service").write_text("[Service]\n")
    passwd = tmp_path / "passwd"
    passwd.write_text(f"root:x:0:0:root:/root:/bin/sh\nalice:x:1000:1000::{home}:/bin/sh\n")
    env = {**box.env(), "SUDO_USER": "alice", "FADEN_AGENT_DOWNLOAD_URL": "https://mirror.invalid/dl"}
    done = in_namespace({SYSTEM_UNITS: units, "/etc/passwd": passwd}, SCRIPT.read_text(), env, [])
    assert done.returncode == 1
    assert done.stderr == (
        f"faden-agent install: an agent runs here as a user service of alice ({home}/.config/systemd/user/"
        "faden-agent.service); run the install line as alice, without sudo:"
        " curl -fsSL https://backend.invalid/downloads/install.sh | FADEN_NODE_AGENT_BACKEND_URL=https://backend.invalid"
        " FADEN_AGENT_DOWNLOAD_URL=https://mirror.invalid/dl sh\n"
    )
    assert not box.curl_log.exists() and box.snapshot() == {}

    (units / "faden-agent.service").write_text("[Service]\n")  # the system service too: root's line is right
    box.serve(box.build("2.0.0"))
    done = in_namespace({SYSTEM_UNITS: units, "/etc/passwd": passwd}, SCRIPT.read_text(), env, [])
    assert done.returncode == 0, done.stderr


def wget_only(box: Sandbox) -> None:
    """A PATH with wget and the tools the script uses, but no curl."""
    (box.path_dir / "curl").unlink()
    tools = "sh head wc tr cat cut sha256sum mktemp mkdir rm mv cp chmod sed uname id wget timeout sleep grep tail"
    tools += " awk getent"
    for tool in tools.split():
        for where in ("/usr/bin", "/bin"):
            if os.path.exists(f"{where}/{tool}"):
                (box.path_dir / tool).symlink_to(f"{where}/{tool}")
                break


@pytest.mark.parametrize(
    "mode, says", [("endless", "bytes it announced"), ("stalled", "or no data for 2s (wget exit 4)")]
)
def test_wget_is_bounded_alike(box, mode, says):
    box.install_old(box.build("1.0.0"))
    before = box.snapshot()
    server = BuildServer(box.build("2.0.0").encode(), mode)
    wget_only(box)
    env = {
        "FADEN_NODE_AGENT_BACKEND_URL": server.url,
        "FADEN_AGENT_ALLOW_HTTP": "1",
        "FADEN_AGENT_DOWNLOAD_STALL_SEC": "2",
        "FADEN_AGENT_DOWNLOAD_TIMEOUT_SEC": "20",
    }
    try:
        done = subprocess.run(
            ["/bin/sh"],
            input=SCRIPT.read_text(),
            env={**box.env(**env), "PATH": str(box.path_dir)},
            capture_output=True,
            text=True,
            timeout=60,
        )
    finally:
        server.release.set()
        server.close()
    assert done.returncode != 0 and says in done.stderr, done.stderr
    assert box.snapshot() == before and box.services() == ""
