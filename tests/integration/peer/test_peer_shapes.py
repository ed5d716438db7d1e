"""Peer transfers of every `docker save` shape between real engines:
the 20.10 engine's own shape, the containerd store's of a real Engine 29 (gzip'd layers;
index.json to a manifest or to a nested index; the image named by that digest), and the
25-28 classic store's layout (made by tests/support/imageshapes.py: no engine here writes it).
The real PeerServer holds, the real Transfer receives; each receiver holds the busybox base
layer, which the holder leaves out, and runs the image it got."""

from __future__ import annotations

import subprocess
import threading
import time
import uuid
from collections.abc import Iterator
from contextlib import closing, contextmanager
from types import SimpleNamespace
from typing import Any

import docker
import pytest

from faden_agent.transfers.archive import chain_ids
from faden_agent.transfers.fetch import PeerFailure, Transfer, held_chains, local_image
from faden_agent.transfers.oci import ZSTD_MAGIC
from faden_agent.transfers.server import PeerServer, saved_layer_paths
from faden_agent.transfers.tickets import Ticket, TicketBox, ticket_hash
from tests.conftest import TEST_IMAGE
from tests.support.backendproc import agent_on_backend, backend, free_port  # noqa: F401
from tests.support.hostilepeer import honest, scripted
from tests.support.imageshapes import classic_layout, containerd_layout, runs_with, stacked_image

pytestmark = pytest.mark.docker


@pytest.fixture(scope="module")
def engines(docker_client, engine29) -> Iterator[dict[str, docker.APIClient]]:
    with closing(engine29.client()) as client29:
        yield {"20.10": docker_client.api, "29": client29.api}


@pytest.fixture(scope="module")
def busybox_save() -> bytes:
    return subprocess.run(["docker", "save", TEST_IMAGE], capture_output=True, check=True, timeout=120).stdout


@pytest.fixture
def made(engines):
    """Images a test puts on an engine, removed after it: made(api, image id)."""
    placed: list[tuple[docker.APIClient, str]] = []
    yield lambda api, image_id: placed.append((api, image_id))
    for api, image_id in placed:
        try:
            api.remove_image(image_id, force=True)
        except docker.errors.APIError:
            pass


def unique_image(busybox_save: bytes) -> tuple[bytes, str, bytes]:
    """A 20.10 archive of busybox + one layer holding a unique marker: (archive, id, marker)."""
    marker = uuid.uuid4().hex.encode()
    archive, image_id = stacked_image(busybox_save, marker)
    return archive, image_id, marker


@contextmanager
def peer_port(api: docker.APIClient, image_id: str, tmp_path) -> Iterator[dict[str, str]]:
    """The real peer port serving `image_id` from the engine of `api` once: the peer entry."""
    box = TicketBox(tmp_path)
    box.add(ticket_hash("t" * 32), Ticket(image_id, "127.0.0.1", time.time() + 120))
    server = PeerServer("127.0.0.1", 0, box, lambda: SimpleNamespace(api=api))
    threading.Thread(target=server.serve, daemon=True).start()
    try:
        yield {"address": f"http://127.0.0.1:{server.port}", "ticket": "t" * 32}
    finally:
        server.shutdown()


def receive(api: docker.APIClient, image_id: str, peer: dict[str, str], reference: str) -> dict[str, Any]:
    transfer = Transfer(api, image_id, reference, False, lambda figures: None, lambda: False, 1 << 30)
    return transfer.run(peer)


def test_a_20_10_holder_serves_its_shape_to_a_29_receiver(engines, busybox_save, made, tmp_path):
    holder, receiver = engines["20.10"], engines["29"]
    archive, image_id, marker = unique_image(busybox_save)
    holder.load_image(archive)
    made(holder, image_id)
    with peer_port(holder, image_id, tmp_path) as peer:
        result = receive(receiver, image_id, peer, "faden-shapes/from20:1")
    made(receiver, result["engine_image_id"])
    # the containerd store names it by the manifest that index.json pointed to, not the config
    assert result["engine_image_id"] != image_id and result["layers_received"] == 1, result
    assert receiver.inspect_image("faden-shapes/from20:1")["Id"] == result["engine_image_id"]
    runs_with(receiver, "faden-shapes/from20:1", marker)


@pytest.mark.parametrize("nested", [False, True], ids=["manifest", "nested index"])
def test_a_29_holder_serves_its_containerd_shape_to_both_engines(engines, busybox_save, made, tmp_path, nested):
    """The 29 engine holds the image with gzip'd layers, named by its manifest or index
    digest; its own docker save is what the peer port sends (its base layer left out)."""
    holder = engines["29"]
    archive, config_id, marker = unique_image(busybox_save)
    layout, image_id = containerd_layout(archive, name=f"faden-shapes/gz-{uuid.uuid4().hex[:8]}:1", nested=nested)
    holder.load_image(layout)
    made(holder, image_id)
    assert holder.inspect_image(image_id)["Id"] == image_id  # the id a 29 inventory reports
    with peer_port(holder, image_id, tmp_path) as peer:
        result = receive(engines["20.10"], image_id, peer, "faden-shapes/from29:1")
    made(engines["20.10"], config_id)
    assert result["engine_image_id"] == config_id and result["layers_received"] == 1, result
    runs_with(engines["20.10"], "faden-shapes/from29:1", marker)
    # 29 to 29: the archive the peer port sent, into an engine that lacks the image
    saved = b"".join(holder.get_image(image_id))
    holder.remove_image(image_id, force=True)
    peer_29 = scripted(honest(image_id, saved))
    try:
        result = receive(holder, image_id, {"address": peer_29.url, "ticket": "t" * 32}, "faden-shapes/gz:2")
    finally:
        peer_29.close()
    assert result["engine_image_id"] == image_id, result  # the same id as the holder's
    runs_with(holder, "faden-shapes/gz:2", marker)


@pytest.mark.parametrize("engine", ["20.10", "29"])
def test_the_classic_store_layout_of_25_to_28_loads_into_both_engines(engines, busybox_save, made, engine):
    archive, image_id, marker = unique_image(busybox_save)
    peer = scripted(honest(image_id, classic_layout(archive, tags=["faden-shapes/classic:1"])))
    try:
        result = receive(engines[engine], image_id, {"address": peer.url, "ticket": "t" * 32}, "faden-shapes/classic:1")
    finally:
        peer.close()
    made(engines[engine], result["engine_image_id"])
    assert result["layers_received"] == 2, result  # a scripted peer leaves nothing out
    runs_with(engines[engine], "faden-shapes/classic:1", marker)


def test_held_chains_are_the_same_on_both_engines(engines):
    base = chain_ids(engines["20.10"].inspect_image(TEST_IMAGE)["RootFS"]["Layers"])
    assert set(base) <= held_chains(engines["20.10"]) and set(base) <= held_chains(engines["29"])


def test_a_layer_no_receiver_can_check_ends_that_peer_with_its_own_reason(engines, busybox_save):
    """zstd layers (Engine 29 can hold them): this agent cannot unpack them to check their
    diff ids, so that peer fails integrity_failed, naming why (the next peer, or the
    registry, is tried as after any peer's failure)."""
    archive, _, _ = unique_image(busybox_save)
    layout, image_id = containerd_layout(archive, nested=False, compress=lambda data: ZSTD_MAGIC + data)
    peer = scripted(honest(image_id, layout))
    try:
        with pytest.raises(PeerFailure) as failure:
            receive(engines["29"], image_id, {"address": peer.url, "ticket": "t" * 32}, "faden-shapes/zstd:1")
    finally:
        peer.close()
    assert failure.value.reason == "integrity_failed" and "zstd-compressed" in failure.value.message
    with pytest.raises(docker.errors.NotFound):
        engines["29"].inspect_image(image_id)


def test_an_image_is_found_by_the_id_either_engine_gives_it(engines, registry):
    """image.fetch's already-present check: a pulled image is named by its
    manifest digest on the containerd store, by its config digest on the classic store, which
    knows the manifest digest as a RepoDigest; a config digest finds nothing on 29 (its
    store cannot be asked by it: the fetch goes ahead and leaves out every held layer)."""
    reference = f"{registry}/faden/busybox"
    for line in engines["29"].pull(reference, tag="1", stream=True, decode=True):
        assert "error" not in line, line
    manifest_id = engines["29"].inspect_image(f"{reference}:1")["Id"]
    config_id = engines["20.10"].inspect_image(f"{reference}:1")["Id"]
    assert manifest_id != config_id
    assert local_image(engines["29"], manifest_id) == manifest_id
    assert local_image(engines["20.10"], manifest_id) == config_id == local_image(engines["20.10"], config_id)
    assert local_image(engines["29"], config_id) is None


def test_the_containerd_holder_reads_its_layer_files_ahead_within_a_bound(engines, busybox_save, made):
    """Which blob holds which layer only the 29's own save says: read ahead once (stopping
    at the manifest blob), remembered; past the bound the whole archive is sent instead."""
    holder = engines["29"]
    archive, _, _ = unique_image(busybox_save)
    layout, image_id = containerd_layout(archive, name=f"faden-shapes/ahead-{uuid.uuid4().hex[:8]}:1", nested=False)
    holder.load_image(layout)
    made(holder, image_id)
    assert saved_layer_paths(holder, image_id, budget_s=0.0) == []
    paths = saved_layer_paths(holder, image_id)
    assert len(paths) == 2 and all(p.startswith("blobs/sha256/") for p in paths)
    assert saved_layer_paths(holder, image_id, budget_s=0.0) == paths  # remembered


def test_real_agents_on_20_10_and_29_serve_each_other(engines, engine29, busybox_save, made, agent_on_backend, backend):
    """The whole path between two real agents, one on each engine: image.serve on the holder
    (its peer worker, on demand), image.fetch on the receiver, both directions; each gets
    the image under its own engine's id, the held busybox base left out."""
    agents = {}
    for name, host in (("20.10", None), ("29", engine29.host)):
        port = free_port()
        engine = {"docker_host": host} if host else {}
        agent, node = agent_on_backend(advertise_host="127.0.0.1", peer_port=port, **engine)
        agents[name] = (node["node_id"], f"http://127.0.0.1:{port}")
    archive, config_id, marker = unique_image(busybox_save)
    layout, index_id = containerd_layout(archive, name=f"faden-shapes/agents-{uuid.uuid4().hex[:8]}:1")
    engines["29"].load_image(layout)
    made(engines["29"], index_id)
    other, other_id, other_marker = unique_image(busybox_save)
    engines["20.10"].load_image(other)
    made(engines["20.10"], other_id)
    for holder, receiver, image_id, want in (("29", "20.10", index_id, config_id), ("20.10", "29", other_id, None)):
        ticket = "agents-" + uuid.uuid4().hex
        spec = {"image_id": image_id, "receiver": "127.0.0.1", "ttl_s": 120, "ticket_sha256": ticket_hash(ticket)}
        served = backend.wait_command(backend.send_command(agents[holder][0], "image.serve", spec), timeout_s=60)
        assert served["state"] == "succeeded", served
        fetch = {
            "image_id": image_id,
            "image": f"faden-shapes/by-agents-{receiver}:1",
            "peers": [{"address": agents[holder][1], "ticket": ticket}],
        }
        done = backend.wait_command(backend.send_command(agents[receiver][0], "image.fetch", fetch), timeout_s=120)
        result = next(t for t in reversed(done["timeline"]) if t["state"] == done["state"]).get("result") or {}
        assert done["state"] == "succeeded", done["timeline"]
        made(engines[receiver], result["engine_image_id"])
        assert result["layers_received"] == 1, result  # the busybox base left out
        assert result["engine_image_id"] == (want or result["engine_image_id"]), result
        runs_with(engines[receiver], fetch["image"], marker if holder == "29" else other_marker)
