"""The cluster rig itself: machines that reach each other and nothing
else, their own engines and agents, and a teardown that leaves nothing behind."""

from __future__ import annotations

import sys

import pytest

from tests.cluster import rig as rigmod
from tests.cluster.rig import BRIDGE_ADDRESS, address_of

pytestmark = [pytest.mark.cluster, pytest.mark.docker]
REFUSED = (
    "import socket\ntry:\n    socket.create_connection(('{address}', 9), 5)\nexcept ConnectionRefusedError:\n    pass"
)


def test_machines_engines_and_agents(cluster_rig):
    rig = cluster_rig
    nodes = {n["node_id"]: n for n in rig.backend.nodes()}
    for machine in rig.machines:
        # its own address, a route to the rig's subnet and nowhere else
        assert machine.address == address_of(machine.index)
        routes = machine.run("ip", "route").stdout.decode().strip().splitlines()
        assert routes == [f"198.18.0.0/24 dev eth0 proto kernel scope link src {machine.address} "] or [
            r.strip() for r in routes
        ] == [f"198.18.0.0/24 dev eth0 proto kernel scope link src {machine.address}"]
        # reaches the backend on the bridge, and every machine (a refused connection is an answer)
        machine.run(
            sys.executable,
            "-c",
            f"import socket; socket.create_connection(('{BRIDGE_ADDRESS}', {rig.backend.port}), 5)",
        )
        for other in rig.machines:
            machine.run(sys.executable, "-c", REFUSED.format(address=other.address))
        # its own engine, holding the test image
        images = machine.docker("images", "--format", "{{.Repository}}:{{.Tag}}").stdout.decode().split()
        assert rigmod.TEST_IMAGE in images
        # its own agent, advertising its own address
        node = nodes[machine.node_id]
        assert node["advertise_host"] == machine.address
        assert node["agent_id"] == f"rig-m{machine.index}"
    # the engines are separate: an image tagged on machine 1 is on machine 1 only
    first, second = rig.machine(1), rig.machine(2)
    first.docker("tag", rigmod.TEST_IMAGE, "faden-rig/only-on-m1:1")
    assert "faden-rig/only-on-m1" in first.docker("images").stdout.decode()
    assert "faden-rig/only-on-m1" not in second.docker("images").stdout.decode()


def test_no_route_off_the_rig(cluster_rig):
    # 192.0.2.1 (TEST-NET-1): never answered anywhere; the point is that no route leads to it
    done = cluster_rig.machine(1).run(
        sys.executable, "-c", "import socket; socket.create_connection(('192.0.2.1', 80), 2)", check=False
    )
    assert b"Network is unreachable" in done.stderr
