"""The peer-image tests' helpers in the cluster rig (tests/cluster/rig.py): a multi-layer image made
on machine 1 only, image and metric look-ups on a machine, and the commands a backend would send
(image.serve's ticket, a command's terminal record)."""

from __future__ import annotations

import hashlib
import io
import secrets
import subprocess
import sys
import tarfile
from typing import Any

from prometheus_client.parser import text_string_to_metric_families

from faden_agent import protocol
from tests.cluster.rig import TEST_IMAGE, Machine, Rig

PEER_PORT = 7480
APP = "faden-peer/app:1"
BASE = "faden-peer/base:1"
OTHER = "faden-peer/other:1"
MB = 1 << 20


# ------------------------------------------------------------------ the image on machine 1


def build_images(holder: Machine, sizes_mb: tuple[int, int, int] = (80, 60, 40)) -> None:
    """BASE: busybox + 80 MB random, imported (one layer); APP: BASE + 60 MB + 40 MB random
    (two committed layers); OTHER: BASE + 5 MB (for the hostile peer)."""
    export = (
        subprocess.run(
            ["docker", "-H", holder.docker_host, "create", TEST_IMAGE, "true"], capture_output=True, check=True
        )
        .stdout.decode()
        .strip()
    )
    rootfs = holder.docker("export", export, timeout=120).stdout
    holder.docker("rm", export)
    base = io.BytesIO()
    with tarfile.open(fileobj=base, mode="w") as out, tarfile.open(fileobj=io.BytesIO(rootfs)) as src:
        for member in src:
            out.addfile(member, src.extractfile(member) if member.isfile() else None)
        blob = secrets.token_bytes(sizes_mb[0] * MB)
        info = tarfile.TarInfo("data/base.bin")
        info.size = len(blob)
        out.addfile(info, io.BytesIO(blob))
    holder.docker("import", "-c", "ENV PATH=/bin", "-", BASE, input=base.getvalue(), timeout=300)
    commit(holder, BASE, "l2", sizes_mb[1], "faden-peer/step:1")
    commit(holder, "faden-peer/step:1", "l3", sizes_mb[2], APP, cmd='["sleep","3600"]')
    commit(holder, BASE, "o2", 5, OTHER, cmd='["sleep","3600"]')


def commit(machine: Machine, image: str, name: str, megabytes: int, tag: str, cmd: str | None = None) -> None:
    container = f"faden-peer-build-{name}"
    machine.docker(
        "run",
        "--name",
        container,
        "--network",
        "none",
        image,
        "sh",
        "-c",
        f"head -c {megabytes * MB} /dev/urandom > /{name}.bin",
        timeout=300,
    )
    options = ["-c", f"CMD {cmd}"] if cmd else []
    machine.docker("commit", *options, container, tag, timeout=300)
    machine.docker("rm", container)


def image_id(machine: Machine, image: str) -> str | None:
    done = machine.docker("image", "inspect", "--format", "{{.Id}}", image, check=False)
    return done.stdout.decode().strip() or None


def image_ids(machine: Machine) -> set[str]:
    return set(machine.docker("images", "-aq", "--no-trunc").stdout.decode().split())


def without(machine: Machine, image: str) -> None:
    machine.docker("rm", "-f", "runtime", check=False)
    machine.docker("rmi", image, check=False)
    assert image_id(machine, image) is None


def copy_image(source: Machine, target: Machine, image: str) -> None:
    """A test setup step (docker save | docker load), not the agent's doing."""
    if image_id(target, image) is None:
        target.docker("load", input=source.docker("save", image, timeout=300).stdout, timeout=300)


def tags(machine: Machine) -> set[str]:
    return set(machine.docker("images", "--format", "{{.Repository}}:{{.Tag}} {{.ID}}").stdout.decode().splitlines())


def tx_bytes(machine: Machine) -> int:
    return int(machine.run("cat", "/sys/class/net/eth0/statistics/tx_bytes").stdout)


# ------------------------------------------------------------------ what a backend sends


FETCHED = "faden_agent_peer_fetched_bytes_total"


def scraped(machine: Machine, name: str) -> float:
    """One unlabelled sample of the agent's /metrics, parsed by Prometheus' own parser; read
    inside the machine's namespace, whose loopback its endpoint listens on (0 when absent)."""
    addr = machine.agent.ps()["supervisor"]["metrics"]["addr"]
    get = f"import sys, urllib.request; sys.stdout.buffer.write(urllib.request.urlopen('http://{addr}/metrics').read())"
    body = machine.run(sys.executable, "-c", get, timeout=30).stdout.decode()
    values = [s.value for f in text_string_to_metric_families(body) for s in f.samples if s.name == name]
    assert len(values) <= 1, values
    return values[0] if values else 0.0


def peer_address(machine: Machine) -> str:
    return f"http://{machine.address}:{PEER_PORT}"


def serve(rig: Rig, holder: Machine, image: str, receiver: str, ttl_s: float = 300) -> str:
    """image.serve on the holder; the ticket (the holder only learns its sha256)."""
    ticket = secrets.token_urlsafe(32)
    spec = {
        "image_id": image,
        "receiver": receiver,
        "ticket_sha256": hashlib.sha256(ticket.encode()).hexdigest(),
        "ttl_s": ttl_s,
    }
    done = rig.backend.wait_command(rig.backend.send_command(holder.node_id, "image.serve", spec), timeout_s=30)
    assert done["state"] == protocol.SUCCEEDED, done
    return ticket


def run_command(rig: Rig, machine: Machine, kind: str, spec: dict[str, Any], timeout_s: float = 300) -> dict[str, Any]:
    return rig.backend.wait_command(rig.backend.send_command(machine.node_id, kind, spec), timeout_s=timeout_s)


def terminal(done: dict[str, Any]) -> dict[str, Any]:
    """The command's terminal timeline record (state, reason, message, result)."""
    return next(t for t in reversed(done["timeline"]) if t["state"] == done["state"])


def result_of(done: dict[str, Any]) -> dict[str, Any]:
    return terminal(done).get("result") or {}


def reason_of(done: dict[str, Any]) -> tuple[str, str]:
    return done["state"], terminal(done).get("reason")


def fetch_progress(done: dict[str, Any]) -> list[dict[str, Any]]:
    return [t for t in done["timeline"] if t["state"] == "progress" and t.get("phase") == "fetch"]
