"""Images from peer machines, in the rig with real engines and agents.

A multi-layer image (~180 MB of random data in three layers: a `docker import`ed base, two
`docker commit` steps) is made on machine 1 only and is on no registry (the machines reach
none). The tests send what a backend would: image.serve to the holder (the ticket's sha256
only), and image.fetch / container.run with peers to the receiver (the ticket).
"""

from __future__ import annotations

import http.server
import io
import json
import re
import signal
import subprocess
import tarfile
import threading
import time

import pytest
import requests

from faden_agent import protocol
from tests.cluster.peerimages import (
    APP,
    BASE,
    FETCHED,
    MB,
    OTHER,
    PEER_PORT,
    build_images,
    copy_image,
    fetch_progress,
    image_id,
    image_ids,
    peer_address,
    reason_of,
    result_of,
    run_command,
    scraped,
    serve,
    tags,
    terminal,
    tx_bytes,
    without,
)
from tests.cluster.rig import BRIDGE_ADDRESS, TEST_IMAGE, Machine
from tests.support.agentproc import wait_for

pytestmark = [pytest.mark.cluster, pytest.mark.docker]

RIG_AGENT_SETTINGS = {"peer_start": "on_demand"}  # production's default (the test helpers' is always)


@pytest.fixture(scope="module")
def rig(cluster_rig):
    build_images(cluster_rig.machine(1))
    # In no cluster and serving nothing yet, no machine runs a peer worker (PEER_START=on_demand,
    # the default): each test's first image.serve starts it, answered once its port listens.
    for machine in cluster_rig.machines:
        wait_for(
            lambda m=machine: (m.agent.workers().get("peer") or {}).get("status", {}).get("on_demand"),
            30,
            what=f"peer worker of machine {machine.index} waiting for demand",
        )
    return cluster_rig


def test_container_run_replace_via_peers_and_only_missing_layers_cross(rig):
    holder, second, third = rig.machine(1), rig.machine(2), rig.machine(3)
    app_id = image_id(holder, APP)
    since = str(int(time.time()) - 1)
    for receiver in (second, third):
        without(receiver, APP)
    # machine 2 already holds the base layer (a test setup step, not the agent's doing)
    copy_image(holder, second, BASE)
    for receiver in (second, third):
        # the runtime switch: a container of the old image is replaced by one of the new
        first = run_command(
            rig, receiver, "container.run", {"name": "runtime", "image": TEST_IMAGE, "command": ["sleep", "3600"]}
        )
        assert first["state"] == protocol.SUCCEEDED, first
        ticket = serve(rig, holder, app_id, receiver.address)
        sent_before, fetched_before = tx_bytes(holder), scraped(receiver, FETCHED)
        done = run_command(
            rig,
            receiver,
            "container.run",
            {
                "name": "runtime",
                "image": APP,
                "replace": True,
                "image_id": app_id,
                "peers": [{"address": peer_address(holder), "ticket": ticket}],
            },
        )
        sent = tx_bytes(holder) - sent_before
        assert done["state"] == protocol.SUCCEEDED, done
        assert result_of(done)["image_id"] == app_id == image_id(receiver, APP)
        last = fetch_progress(done)[-1]  # progress: bytes done/total, rate, source
        assert last["source"] == f"{holder.address}:{PEER_PORT}" and last["bytes_done"] >= last["bytes_total"] > 0
        assert last["rate_bps"] > 0
        # /metrics counts the bytes whichever kind fetched them (here container.run)
        moved = lambda m=receiver, before=fetched_before, size=last["bytes_done"]: scraped(m, FETCHED) - before == size  # noqa: E731
        wait_for(moved, 10, 0.5, "fetched bytes in /metrics")
        inspect = json.loads(receiver.docker("inspect", "runtime").stdout)[0]
        assert inspect["Image"] == app_id and inspect["State"]["Running"]
        receiver.sent = sent  # for the figures below
        print(f"machine {receiver.index}: {sent / MB:.1f} MiB on the wire; {last}")
    # only the missing layers crossed to machine 2 (~100 MB of 180), all of them to machine 3
    assert 95 * MB < second.sent < 115 * MB, second.sent
    assert 175 * MB < third.sent < 200 * MB, third.sent
    # machine 1's engine was never asked to push anything
    pushes = holder.docker("events", "--since", since, "--until", str(int(time.time())), "--filter", "event=push")
    assert pushes.stdout.strip() == b""


def test_tickets_single_use_expiring_bound_to_image_and_receiver(rig):
    holder = rig.machine(1)
    app_id, base_id = image_id(holder, APP), image_id(holder, BASE)
    url = f"{peer_address(holder)}/v1/images/fetch"

    def fetch(ticket: str, image: str) -> requests.Response:
        return requests.post(
            url,
            json={"image_id": image, "held_chains": []},
            stream=True,
            timeout=30,
            headers={"Authorization": f"Bearer {ticket}"},
        )

    ticket = serve(rig, holder, base_id, BRIDGE_ADDRESS)  # this test process is the receiver
    with fetch(ticket, base_id) as first:
        assert first.status_code == 200 and first.headers["X-Faden-Image-Id"] == base_id
        assert next(first.iter_content(65536))  # it streams
    with fetch(ticket, base_id) as again:
        assert (again.status_code, again.json()["reason"]) == (401, "ticket_refused")
    other = serve(rig, holder, base_id, BRIDGE_ADDRESS)
    with fetch(other, app_id) as wrong_image:
        assert (wrong_image.status_code, wrong_image.json()["reason"]) == (401, "ticket_refused")
    with fetch(other, base_id) as spent_by_the_wrong_try:
        assert spent_by_the_wrong_try.status_code == 401
    short = serve(rig, holder, base_id, BRIDGE_ADDRESS, ttl_s=1)
    time.sleep(1.5)
    with fetch(short, base_id) as expired:
        assert (expired.status_code, expired.json()["reason"]) == (401, "ticket_expired")
    elsewhere = serve(rig, holder, base_id, rig.machine(3).address)
    with fetch(elsewhere, base_id) as wrong_receiver:
        assert (wrong_receiver.status_code, wrong_receiver.json()["reason"]) == (401, "ticket_refused")
    # through the agent: a spent ticket ends image.fetch with the holder's reason
    receiver = rig.machine(2)
    done = run_command(
        rig,
        receiver,
        "image.fetch",
        {
            "image_id": image_id(holder, OTHER),
            "image": OTHER,
            "peers": [{"address": peer_address(holder), "ticket": ticket}],
        },
    )
    assert reason_of(done) == (protocol.FAILED, "ticket_refused"), done
    assert image_id(receiver, OTHER) is None


# ------------------------------------------------------------------ a hostile peer


def tampered(archive: bytes, how: str, other_archive: bytes) -> bytes:
    if how == "different image":
        return other_archive
    out_buffer = io.BytesIO()
    with (
        tarfile.open(fileobj=io.BytesIO(archive)) as src,
        tarfile.open(fileobj=out_buffer, mode="w", format=tarfile.PAX_FORMAT) as out,
    ):
        for member in src:
            data = src.extractfile(member).read() if member.isfile() else None
            if how == "corrupted layer" and member.name.endswith("/layer.tar") and member.size > 4 * MB:
                data = data[:MB] + bytes([data[MB] ^ 0xFF]) + data[MB + 1 :]
            if how == "tags busybox:latest" and member.name == "manifest.json":
                manifest = json.loads(data)
                manifest[0]["RepoTags"] = ["busybox:latest"]
                data = json.dumps(manifest).encode()
                member.size = len(data)
            out.addfile(member, io.BytesIO(data) if data is not None else None)
    return out_buffer.getvalue()


class HostilePeer:
    """A test server on the bridge that answers every fetch with the archive it is given."""

    def __init__(self, image: str):
        self.body = b""
        peer = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_POST(self):
                self.rfile.read(int(self.headers.get("Content-Length") or 0))
                self.send_response(200)
                self.send_header("Content-Length", str(len(peer.body)))
                self.send_header("X-Faden-Image-Id", image)
                self.send_header("X-Faden-Bytes-Total", str(len(peer.body)))
                self.end_headers()
                self.wfile.write(peer.body)

            def log_message(self, *args):
                pass

        self.httpd = http.server.ThreadingHTTPServer((BRIDGE_ADDRESS, 0), Handler)
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()
        self.address = f"http://{BRIDGE_ADDRESS}:{self.httpd.server_address[1]}"


@pytest.mark.parametrize(
    "how, why",
    [
        ("corrupted layer", "corrupted"),
        ("different image", "a different image"),
        ("tags busybox:latest", "would tag busybox:latest"),
    ],
)
def test_a_hostile_peer_ends_integrity_failed_and_changes_nothing(rig, how, why):
    holder, receiver = rig.machine(1), rig.machine(2)
    other_id = image_id(holder, OTHER)
    receiver.docker("rmi", "-f", other_id, check=False)
    genuine = holder.docker("save", other_id, timeout=300).stdout
    peer = HostilePeer(other_id)
    try:
        peer.body = tampered(genuine, how, holder.docker("save", image_id(holder, BASE), timeout=300).stdout)
        receiver.docker("tag", TEST_IMAGE, "busybox:latest")
        before = (image_ids(receiver), tags(receiver))
        done = run_command(
            rig,
            receiver,
            "image.fetch",
            {"image_id": other_id, "image": OTHER, "peers": [{"address": peer.address, "ticket": "t" * 32}]},
        )
        assert reason_of(done) == (protocol.FAILED, "integrity_failed"), terminal(done)
        assert why in terminal(done)["message"], terminal(done)
        after = (image_ids(receiver), tags(receiver))
        assert after == before  # no image, no tag changed, nothing half-loaded
        assert image_id(receiver, "busybox:latest") == image_id(receiver, TEST_IMAGE)
    finally:
        peer.httpd.shutdown()
        receiver.docker("rmi", "busybox:latest", check=False)


def test_kill_of_the_serving_agent_mid_transfer_completes_from_another_source(rig):
    holder, backup, receiver = rig.machine(1), rig.machine(2), rig.machine(3)
    app_id = image_id(holder, APP)
    without(receiver, APP)
    copy_image(holder, backup, APP)
    peers = [{"address": peer_address(m), "ticket": serve(rig, m, app_id, receiver.address)} for m in (holder, backup)]
    rig.shape(1, rate_mbit=80)  # ~20 s for the image: time to kill mid-way
    try:
        command_id = rig.backend.send_command(
            receiver.node_id, "image.fetch", {"image_id": app_id, "image": APP, "peers": peers}
        )
        sent_before = tx_bytes(holder)
        wait_for(lambda: tx_bytes(holder) - sent_before > 30 * MB, 120, what="machine 1 serving mid-way")
        holder.agent.proc.send_signal(signal.SIGKILL)
        done = rig.backend.wait_command(command_id, timeout_s=300)
    finally:
        rig.unshape(1)
        holder.agent.kill()
        rig.start_agent(holder)  # the same agent again, for the tests after this one
        rig.wait_agent(holder)
    assert done["state"] == protocol.SUCCEEDED, done
    assert result_of(done)["source"].startswith(backup.address), done
    assert image_id(receiver, APP) == app_id
    failed = result_of(done)["failed_sources"]
    # wherever the kill cut the stream (a size line, the data, a CRLF; an EOF or a reset), a
    # killed holder reads the one way: a stream that broke, never "malformed"
    assert len(failed) == 1 and holder.address in failed[0], failed
    assert re.search(rf"the stream from peer {re.escape(holder.address)}:\d+ broke after \d+ bytes", failed[0]), failed


def test_a_cancelled_fetch_leaves_nothing(rig):
    holder, receiver = rig.machine(1), rig.machine(3)
    app_id = image_id(holder, APP)
    without(receiver, APP)
    before = (image_ids(receiver), tags(receiver))
    ticket = serve(rig, holder, app_id, receiver.address)
    rig.shape(1, rate_mbit=80)
    try:
        command_id = rig.backend.send_command(
            receiver.node_id,
            "image.fetch",
            {"image_id": app_id, "image": APP, "peers": [{"address": peer_address(holder), "ticket": ticket}]},
        )
        wait_for(
            lambda: any(p["bytes_done"] > 20 * MB for p in fetch_progress(rig.backend.command(command_id))),
            120,
            what="the fetch under way",
        )
        cancel = run_command(rig, receiver, "command.cancel", {"command_id": command_id})
        assert cancel["state"] == protocol.SUCCEEDED, cancel
        done = rig.backend.wait_command(command_id, timeout_s=60)
    finally:
        rig.unshape(1)
    assert reason_of(done) == (protocol.CANCELLED, "cancelled"), terminal(done)
    assert (image_ids(receiver), tags(receiver)) == before
    # the engine removed its unpacking directory: nothing half-loaded stays on disk
    wait_for(
        lambda: not list((receiver.root / "docker" / "tmp").glob("docker-import-*")),
        30,
        what="docker load's temporary directory removed",
    )


def separated(a: Machine, b: Machine, cut: bool) -> None:
    """Drop what the bridge forwards between two machines (both still reach the backend)."""
    for source, target in ((a, b), (b, a)):
        rule = ["FORWARD", "-s", source.address, "-d", target.address, "-j", "DROP"]
        subprocess.run(
            ["iptables", "-I" if cut else "-D", *([rule[0], "1", *rule[1:]] if cut else rule)],
            check=cut,
            capture_output=True,
        )


def test_peers_that_cannot_reach_each_other_relay_through_the_backend(rig):
    holder, receiver = rig.machine(1), rig.machine(3)
    app_id = image_id(holder, APP)
    without(receiver, APP)
    separated(holder, receiver, True)
    try:
        ticket = serve(rig, holder, app_id, receiver.address)
        direct = run_command(
            rig,
            receiver,
            "image.fetch",
            {"image_id": app_id, "image": APP, "peers": [{"address": peer_address(holder), "ticket": ticket}]},
        )
        assert reason_of(direct) == (protocol.FAILED, "peer_unreachable"), terminal(direct)
        relay = rig.backend.admin.relay(app_id, holder.node_id, receiver.node_id, APP)
        done = rig.backend.wait_command(relay["fetch_command"], timeout_s=300)
        assert done["state"] == protocol.SUCCEEDED, terminal(done)
        assert result_of(done)["source"] == f"{BRIDGE_ADDRESS}:{rig.backend.port}"
        served = rig.backend.wait_command(relay["relay_command"], timeout_s=60)
        assert served["state"] == protocol.SUCCEEDED, terminal(served)
        assert image_id(receiver, APP) == app_id
    finally:
        separated(holder, receiver, False)


def test_image_pull_falls_back_to_peers_and_a_present_image_is_only_tagged(rig):
    holder, receiver = rig.machine(1), rig.machine(2)
    other = image_id(holder, OTHER)
    without(receiver, OTHER)
    peers = [{"address": peer_address(holder), "ticket": serve(rig, holder, other, receiver.address)}]
    served, fetched = "faden_agent_peer_served_bytes_total", FETCHED
    served_before, fetched_before = scraped(holder, served), scraped(receiver, fetched)
    done = run_command(rig, receiver, "image.pull", {"image": OTHER, "image_id": other, "peers": peers})
    assert done["state"] == protocol.SUCCEEDED, terminal(done)
    result = result_of(done)
    assert result["source"] == f"{holder.address}:{PEER_PORT}" and result["registry_failure"] in (
        "registry_unreachable",
        "image_not_found",
    ), result
    assert image_id(receiver, OTHER) == other
    # both agents' /metrics count the transfer: at least its 5 MB layer, the same bytes on both sides
    crossed = result["bytes_received"]
    assert crossed > 5 * MB, result
    wait_for(lambda: scraped(receiver, fetched) - fetched_before == crossed, 10, 0.5, "fetched bytes in /metrics")
    wait_for(
        lambda: abs(scraped(holder, served) - served_before - crossed) <= crossed / 100,
        10,
        0.5,
        "served bytes in /metrics",
    )
    print(
        f"{crossed} bytes crossed; /metrics: served +{scraped(holder, served) - served_before:.0f} on machine 1,"
        f" fetched +{scraped(receiver, fetched) - fetched_before:.0f} on machine 2"
    )
    # already there under another name: tagged, nothing crosses (the ticket is not even used)
    receiver.docker("tag", other, "faden-peer/other:old")
    receiver.docker("rmi", OTHER)
    again = run_command(rig, receiver, "image.fetch", {"image_id": other, "image": OTHER, "peers": peers})
    assert result_of(again)["already_present"] is True and image_id(receiver, OTHER) == other
    receiver.docker("rmi", "-f", other)  # the hostile-peer tests need it absent
