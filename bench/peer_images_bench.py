"""Images from peers (issue 14): transfer rate through the agents vs a plain pipe, and the
bytes sent when the receiver holds the base layers.

    sudo python3 bench/peer_images_bench.py [--mb 200,100,100] [--rounds 3]

A 2-machine cluster rig (tests/cluster/rig.py: real engines, agents, backend). Machine 1
makes a 3-layer image of random data (tests/cluster/test_peer_images.build_images). Side
by side, alternating, each round starting with the image absent on machine 2:
  agents   image.fetch on machine 2 from machine 1's peer worker (ticket via image.serve),
           timed from the command's `started` to `succeeded` (the agent's own figures:
           bytes received, seconds);
  pipe     `docker save ID` on machine 1 | TCP (python socket copy) | `docker load` on
           machine 2, the same engines and link, timed end to end.
Then once with machine 2 holding the base layer: bytes on machine 1's wire vs the image.
--fanout: a 4-machine rig, the image to the other 3 by the backend's fan-out vs all 3
fetching from machine 1 at once, vs one transfer alone (the ideal: log2(4) = 2 transfer times).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run as a file: the repository root

from tests.cluster.peerimages import (
    APP,
    BASE,
    MB,
    build_images,
    copy_image,
    image_id,
    peer_address,
    serve,
    terminal,
    tx_bytes,
    without,
)
from tests.cluster.rig import Rig, run

PIPE_PORT = 9799
RECEIVE = (
    "import socket, shutil, sys; s = socket.socket(); "
    "s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1); "
    "s.bind(('{address}', {port})); s.listen(1); c, _ = s.accept(); "
    "shutil.copyfileobj(c.makefile('rb'), sys.stdout.buffer, 1 << 20)"
)
SEND = (
    "import socket, shutil, sys, time\nfor _ in range(100):\n    try:\n"
    "        c = socket.create_connection(('{address}', {port}))\n"
    "        break\n    except OSError:\n        time.sleep(0.1)\n"
    "shutil.copyfileobj(sys.stdin.buffer, c.makefile('wb'), 1 << 20)"
)


def through_agents(rig: Rig, holder, receiver, image: str) -> dict:
    ticket = serve(rig, holder, image, receiver.address)
    command_id = rig.backend.send_command(
        receiver.node_id,
        "image.fetch",
        {"image_id": image, "image": APP, "peers": [{"address": peer_address(holder), "ticket": ticket}]},
    )
    done = rig.backend.wait_command(command_id, timeout_s=1800)
    end = terminal(done)
    assert done["state"] == "succeeded", end
    started = next(t["ts"] for t in done["timeline"] if t["state"] == "started")
    return {"seconds": end["ts"] - started, "bytes": end["result"]["bytes_received"]}


def through_pipe(holder, receiver, image: str) -> dict:
    python = sys.executable
    began = time.monotonic()
    load = receiver.popen(
        "sh",
        "-c",
        f'{python} -c "{RECEIVE.format(address=receiver.address, port=PIPE_PORT)}" '
        f"| docker -H {receiver.docker_host} load -q",
    )
    save = holder.popen(
        "sh",
        "-c",
        f'docker -H {holder.docker_host} save {image} | {python} -c "$SEND"',
        env={"SEND": SEND.format(address=receiver.address, port=PIPE_PORT), "PATH": "/usr/sbin:/usr/bin:/sbin:/bin"},
    )
    assert save.wait(1800) == 0 and load.wait(1800) == 0
    seconds = time.monotonic() - began
    run(["docker", "-H", receiver.docker_host, "tag", image, APP])
    return {"seconds": seconds}


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--mb", default="200,100,100", help="layer sizes in MB: imported base, two commits")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument(
        "--fanout", action="store_true", help="also fan-out to 3 machines vs one holder (a 4-machine rig)"
    )
    args = parser.parse_args()
    sizes = tuple(int(x) for x in args.mb.split(","))
    with Rig(2) as rig:
        holder, receiver = rig.machine(1), rig.machine(2)
        build_images(holder, sizes)
        app = image_id(holder, APP)
        size = int(run(["docker", "-H", holder.docker_host, "image", "inspect", "--format", "{{.Size}}", app]).stdout)
        agents, pipe = [], []
        for _ in range(args.rounds):
            without(receiver, APP)
            run(["docker", "-H", receiver.docker_host, "rmi", BASE], check=False)
            agents.append(through_agents(rig, holder, receiver, app))
            without(receiver, APP)
            pipe.append(through_pipe(holder, receiver, app))
            assert image_id(receiver, APP) == app
        without(receiver, APP)
        copy_image(holder, receiver, BASE)
        before = tx_bytes(holder)
        partial = through_agents(rig, holder, receiver, app)
        wire = tx_bytes(holder) - before
    fanout = fan_out(sizes) if args.fanout else None
    agent_s = statistics.median(r["seconds"] for r in agents)
    pipe_s = statistics.median(r["seconds"] for r in pipe)
    print(f"image: {size / MB:.0f} MiB in layers of {args.mb} MB; {args.rounds} rounds each, medians")
    print(
        f"agents (image.fetch, verified):  {agent_s:6.1f} s  {size / agent_s / MB:6.1f} MiB/s"
        f"   runs {[round(r['seconds'], 1) for r in agents]}"
    )
    print(
        f"docker save | TCP | docker load: {pipe_s:6.1f} s  {size / pipe_s / MB:6.1f} MiB/s"
        f"   runs {[round(r['seconds'], 1) for r in pipe]}"
    )
    print(f"ratio agents/pipe (rate): {pipe_s / agent_s:.2f}x")
    print(
        f"base layer ({sizes[0]} MB) held by the receiver: {wire / MB:.1f} MiB on the holder's wire, "
        f"{partial['bytes'] / MB:.1f} MiB received, image {size / MB:.0f} MiB"
    )
    if fanout:
        print(
            f"fan-out to {fanout['targets']} machines (backend fan-out): {fanout['fanout_s']:.1f} s; "
            f"all from one holder at once: {fanout['one_holder_s']:.1f} s; "
            f"one transfer alone: {fanout['single_s']:.1f} s "
            f"(ideal log2: {fanout['rounds']} x {fanout['single_s']:.1f} = "
            f"{fanout['rounds'] * fanout['single_s']:.1f} s)"
        )
    return 0


def fan_out(sizes: tuple[int, ...], machines: int = 4) -> dict:
    """Fan-out through the reference backend vs every target fetching from one holder at once."""
    import math

    from tests.support.agentproc import wait_for

    with Rig(machines) as rig:
        holder, targets = rig.machine(1), rig.machines[1:]
        build_images(holder, sizes)
        app = image_id(holder, APP)
        rig.backend.admin.set_cluster("bench", [m.node_id for m in rig.machines])
        single = through_agents(rig, holder, targets[0], app)["seconds"]
        for target in targets:
            without(target, APP)
        began = time.monotonic()
        commands = [
            rig.backend.send_command(
                t.node_id,
                "image.fetch",
                {
                    "image_id": app,
                    "image": APP,
                    "peers": [{"address": peer_address(holder), "ticket": serve(rig, holder, app, t.address)}],
                },
            )
            for t in targets
        ]
        for command_id in commands:
            assert rig.backend.wait_command(command_id, timeout_s=1800)["state"] == "succeeded"
        one_holder = time.monotonic() - began
        for target in targets:
            without(target, APP)
        wait_for(
            lambda: (
                not any(
                    i["id"] == app
                    for t in targets
                    for i in ((rig.backend.inventory(t.node_id) or {}).get("inventory") or {})
                    .get("docker", {})
                    .get("images", [])
                )
            ),
            60,
            interval_s=0.5,
            what="the targets' inventories without the image",
        )
        fanout_id = rig.backend.admin.fanout("bench", app, APP)
        status = wait_for(
            lambda: (s := rig.backend.admin.fanout_status("bench", fanout_id))["state"] != "running" and s,
            1800,
            interval_s=0.2,
            what="the fan-out",
        )
        assert status["state"] == "done", status
        return {
            "targets": len(targets),
            "single_s": single,
            "one_holder_s": one_holder,
            "fanout_s": status["ended_at"] - status["started_at"],
            "rounds": math.ceil(math.log2(machines)),
        }


if __name__ == "__main__":
    sys.exit(main())
