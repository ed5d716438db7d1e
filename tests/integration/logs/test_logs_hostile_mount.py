"""A hostile tenant in a real managed Ray container (`ray: true`, made by the executor) turns
its log mount against the root agent: symlinks to a host secret and to /dev/zero, a device
node, a FIFO, a hard link to a file outside the mount, directory symlinks (a loop, and an
escape to a host directory holding the secret) and a 1,000,000-line file. The secret never
reaches Loki, the worker's memory stays under its bound, the container's other Ray file
keeps shipping, and `ps --json` counts each refused entry once."""

from __future__ import annotations

import os
import time

import pytest

from faden_agent import protocol
from tests.conftest import TEST_IMAGE
from tests.support.executorproc import executor_factory, prefix, remove_containers  # noqa: F401
from tests.support.journalfiles import JournalWriter
from tests.support.logsagent import RSS_BOUND_BYTES, PeakRss, logs_pid, text
from tests.support.lokireceiver import LokiReceiver

pytestmark = pytest.mark.docker

SECRET = "SECRET-CREDENTIAL-9f1c"
BIG_LINES = 1_000_000
SESSION = "session_2026-01-01_00-00-00_1"


class Tally:
    """Counts the Ray lines at the receiver incrementally (a million entries: never rescan)."""

    def __init__(self, loki: LokiReceiver):
        self.loki, self.seen, self.big, self.ticks = loki, 0, 0, 0

    def update(self) -> tuple[int, int]:
        with self.loki._lock:
            new = self.loki._entries[self.seen :]
        self.seen += len(new)
        for entry in new:
            if entry.labels.get("source") == "ray-serve":
                self.big += entry.line.startswith("big ")
                self.ticks += entry.line.startswith("tick ")
        return self.big, self.ticks

    def wait(self, done, timeout_s: float) -> tuple[int, int]:
        deadline = time.monotonic() + timeout_s
        while not done():
            assert time.monotonic() < deadline, f"timed out: {self.big} big lines, {self.ticks} ticks at the receiver"
            time.sleep(0.5)
            self.update()
        return self.big, self.ticks


def hostile_script(secret_file: str, secret_dir: str) -> str:
    serve = f"{protocol.RAY_LOG_MOUNT}/{SESSION}/logs/serve"
    return "; ".join(
        [
            f"B=busybox; S={serve}; $B mkdir -p $S {protocol.RAY_LOG_MOUNT}/session_escape/logs",
            f"$B ln -s {secret_file} $S/controller_secret.log",  # a host path, followed by nobody
            "$B ln -s /dev/zero $S/replica_zero.log",
            "$B mknod $S/replica_dev.log c 1 5",  # /dev/zero again, as a device node
            "$B mkfifo $S/proxy_fifo.log",
            "$B ln -s loop.log $S/loop.log",
            f"$B ln -s {protocol.RAY_LOG_MOUNT}/session_loop {protocol.RAY_LOG_MOUNT}/session_loop",
            f"$B ln -s {secret_dir} {protocol.RAY_LOG_MOUNT}/session_escape/logs/serve",
            f"$B awk 'BEGIN {{ for (i = 1; i <= {BIG_LINES}; i++) printf \"big %07d\\n\", i }}' > $S/replica_big.log",
            'i=0; while true; do i=$((i+1)); echo "tick $i" >> $S/controller_1.log; $B sleep 0.1; done',
        ]
    )


def test_a_hostile_ray_container_cannot_read_host_files_or_stall_shipping(
    executor_factory,
    prefix,
    docker_client,
    tmp_path,
):
    host = tmp_path / "host"
    host.mkdir()
    secret = host / "credential.log"
    secret.write_text(f"{SECRET}\n")
    journal = JournalWriter(tmp_path / "journal")
    journal.append(journal.lines(["boot"]))
    name = f"{prefix}-ray"
    with LokiReceiver() as loki:
        agent, ex = executor_factory(
            full_agent=True,
            loki_url=loki.url,
            journal_directory=journal.directory,
            log_flush_interval_sec=0.2,
            log_batch_size=1000,
        )
        try:
            rss = PeakRss(logs_pid(agent))
            done = ex.run(
                f"{prefix}-run",
                "container.run",
                {
                    "name": name,
                    "image": TEST_IMAGE,
                    "ray": True,
                    "command": ["sh", "-c", hostile_script(str(secret), str(host))],
                },
            )
            assert done["state"] == "succeeded", done
            mount_dir = tmp_path / "ray" / name
            assert (mount_dir.stat().st_mode & 0o777) == 0o750 and ((tmp_path / "ray").stat().st_mode & 0o777) == 0o700
            serve = mount_dir / SESSION / "logs" / "serve"
            deadline = time.monotonic() + 30
            while not (serve / "replica_big.log").exists() and time.monotonic() < deadline:
                time.sleep(0.1)
            os.link(secret, serve / "controller_hard.log")  # a hard link to a file outside the mount

            tally = Tally(loki)
            # The other file ships while the big one is read: ticks arrive before the last big line.
            ticks_during = tally.wait(lambda: tally.ticks >= 3 and tally.big < BIG_LINES, 120)
            tally.wait(lambda: tally.big >= BIG_LINES, 600)
            ticks_before = tally.ticks
            tally.wait(lambda: tally.ticks >= ticks_before + 5, 60)  # and after it
            peak = rss.stop()
            status = agent.workers()["logs"]["status"]["sources"]["ray-serve"]
            entries = loki.entries()
        finally:
            remove_containers(docker_client, prefix)
    print(
        f"log worker peak RSS with a 1,000,000-line Ray file and hostile entries: {peak / 2**20:.1f} MiB; "
        f"ticks shipped while the big file was read: {ticks_during[1]} (big lines then {ticks_during[0]})"
    )
    ray_lines = [e for e in entries if e.labels.get("source") == "ray-serve"]
    assert not [e for e in entries if SECRET in e.line], "the host secret reached Loki"
    assert status["refused"] == {"symlink": 5, "not_regular": 2, "hard_link": 1}, status
    assert status["refused_total"] == 8
    big = sorted(int(text(e).split()[1]) for e in ray_lines if text(e).startswith("big "))
    assert len(set(big)) == BIG_LINES and big[0] == 1 and big[-1] == BIG_LINES
    labels = {e.labels["file"] for e in ray_lines}
    assert labels == {"replica", "controller"}
    assert peak < RSS_BOUND_BYTES


def test_the_log_mount_is_writable_by_the_containers_user_and_nobody_else(
    executor_factory,
    prefix,
    docker_client,
    tmp_path,
):
    _, ex = executor_factory()
    name = f"{prefix}-ray-user"
    try:
        done = ex.run(
            f"{prefix}-run",
            "container.run",
            {
                "name": name,
                "image": TEST_IMAGE,
                "ray": True,
                "user": "1000:100",
                "command": ["sh", "-c", f"echo ok > {protocol.RAY_LOG_MOUNT}/written && sleep 300"],
            },
        )
        assert done["state"] == "succeeded", done
        mount_dir = tmp_path / "ray" / name
        deadline = time.monotonic() + 20
        while not (mount_dir / "written").exists() and time.monotonic() < deadline:
            time.sleep(0.1)
        st = mount_dir.stat()
        assert (mount_dir / "written").read_text() == "ok\n" and (mount_dir / "written").stat().st_uid == 1000
        assert (st.st_uid, st.st_gid, st.st_mode & 0o777) == (1000, 100, 0o750)
    finally:
        remove_containers(docker_client, prefix)
