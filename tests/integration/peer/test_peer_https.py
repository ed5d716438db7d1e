"""The peer port over https: ADVERTISE_SCHEME=https serves with the operator's
certificate and key (the peer worker's PeerServer against the real engine)."""

from __future__ import annotations

import subprocess
import tarfile
import threading
import time

import pytest
import requests

from faden_agent.transfers.server import PeerServer
from faden_agent.transfers.tickets import Ticket, TicketBox, ticket_hash

pytestmark = pytest.mark.docker


def test_the_peer_port_speaks_https_with_the_operators_certificate(tmp_path, docker_client):
    """ADVERTISE_SCHEME=https: the holder serves with the operator's certificate and key; a
    receiver trusting that certificate streams the archive, one without it cannot connect."""
    cert, key = tmp_path / "peer.crt", tmp_path / "peer.key"
    subprocess.run(
        [
            "openssl",
            "req",
            "-x509",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-days",
            "1",
            "-subj",
            "/CN=127.0.0.1",
            "-addext",
            "subjectAltName=IP:127.0.0.1",
            "-keyout",
            str(key),
            "-out",
            str(cert),
        ],
        check=True,
        capture_output=True,
    )
    image = docker_client.images.get("faden-test/busybox:1").id
    box = TicketBox(tmp_path)
    server = PeerServer("127.0.0.1", 0, box, lambda: docker_client, tls=(str(cert), str(key)))
    threading.Thread(target=server.serve, daemon=True).start()
    try:
        url = f"https://127.0.0.1:{server.port}/v1/images/fetch"
        box.add(ticket_hash("h" * 32), Ticket(image, "127.0.0.1", time.time() + 60))
        with pytest.raises(requests.exceptions.SSLError):
            requests.post(url, json={"image_id": image}, headers={"Authorization": "Bearer " + "h" * 32}, timeout=10)
        box.add(ticket_hash("i" * 32), Ticket(image, "127.0.0.1", time.time() + 60))
        with requests.post(
            url,
            json={"image_id": image, "held_chains": []},
            stream=True,
            timeout=30,
            verify=str(cert),
            headers={"Authorization": "Bearer " + "i" * 32},
        ) as response:
            assert response.status_code == 200 and response.headers["X-Faden-Image-Id"] == image
            with tarfile.open(fileobj=response.raw, mode="r|") as archive:
                names = [member.name for member in archive]
            assert f"{image.removeprefix('sha256:')}.json" in names and "manifest.json" in names
    finally:
        server.shutdown()
