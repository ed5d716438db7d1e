"""Fan-out of an image to every machine of a cluster through the reference backend:
machines that finished serve the next ones. A 4-machine rig, real engines and agents."""

from __future__ import annotations

import pytest

from tests.cluster.peerimages import APP, build_images, image_id
from tests.support.agentproc import wait_for

pytestmark = [pytest.mark.cluster, pytest.mark.docker]


def test_finished_machines_become_sources(rig_factory):
    rig = rig_factory(4)
    holder = rig.machine(1)
    build_images(holder, (30, 20, 20))
    app = image_id(holder, APP)
    nodes = [m.node_id for m in rig.machines]
    rig.backend.admin.set_cluster("peers", nodes)
    wait_for(
        lambda: any(
            i["id"] == app
            for i in ((rig.backend.inventory(holder.node_id) or {}).get("inventory") or {})
            .get("docker", {})
            .get("images", [])
        ),
        60,
        interval_s=0.5,
        what="machine 1's inventory listing the image",
    )
    fanout = rig.backend.admin.fanout("peers", app, APP)
    status = wait_for(
        lambda: (s := rig.backend.admin.fanout_status("peers", fanout))["state"] != "running" and s,
        600,
        interval_s=0.5,
        what="the fan-out to end",
    )
    assert status["state"] == "done", status
    for machine in rig.machines:
        assert image_id(machine, APP) == app
    transfers = status["transfers"]
    assert sorted(t["target"] for t in transfers) == sorted(nodes[1:]) and all(
        t["state"] == "succeeded" for t in transfers
    )
    # round 1: machine 1 -> one machine; round 2: both serve the other two (log2(4) = 2 rounds)
    from_first = [t for t in transfers if t["source"] == holder.node_id]
    assert len(from_first) == 2, transfers
    relayed = next(t for t in transfers if t["source"] != holder.node_id)
    first_done = min(t["ended_at"] for t in from_first)
    assert relayed["started_at"] >= first_done and relayed["source"] in {t["target"] for t in from_first}
