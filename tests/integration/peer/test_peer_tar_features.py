"""image.fetch in a real executor from peers that send tar features: a save whose layer is a GNU
sparse member (20 KB on the wire, 256 MiB once its holes are filled) and a save behind a PAX
global header are refused naming the feature, nothing loaded; a real save whose every entry
has the PAX header Go writes is fetched, on the 20.10 engine, and runs on a real Engine 29."""

from __future__ import annotations

import time
import uuid
from contextlib import closing

import pytest

from faden_agent import protocol
from faden_agent.transfers.fetch import Transfer
from tests.support.executorproc import executor_factory  # noqa: F401
from tests.support.hostilepeer import ScriptedPeer, absent_image, honest, remove_image, scripted
from tests.support.imageshapes import containerd_layout, runs_with, stacked_image
from tests.support.tarfeatures import MiB, sparse_image, with_global_header, with_go_pax_headers

pytestmark = pytest.mark.docker


def fetch_spec(image_id: str, url: str, **extra) -> dict:
    return {"image_id": image_id, "peers": [{"address": url, "ticket": "t" * 32}], **extra}


@pytest.fixture
def peer():
    started: list[ScriptedPeer] = []

    def serve(image_id: str, archive: bytes) -> ScriptedPeer:
        started.append(made := scripted(honest(image_id, archive)))
        return made

    yield serve
    for made in started:
        made.close()


def test_a_sparse_layer_is_refused_and_never_reaches_the_engine(executor_factory, peer, docker_client):
    image_id, archive = sparse_image(256 * MiB)
    served = peer(image_id, archive)
    _, ex = executor_factory()
    done = ex.run("fetch-sparse", "image.fetch", fetch_spec(image_id, served.url, size_bytes=MiB), timeout_s=120)
    print(f"{len(archive)} bytes on the wire: {done['state']} {done.get('reason')}: {done.get('message')}")
    assert (done["state"], done["reason"]) == (protocol.FAILED, "integrity_failed"), done
    assert "is a tar entry of type b'S': no docker save writes one" in done["message"]
    assert not [i for i in docker_client.images.list(all=True) if i.id == image_id]


def test_a_global_header_is_refused(executor_factory, peer, docker_client):
    image_id, saved = absent_image(docker_client)
    served = peer(image_id, with_global_header(saved))
    _, ex = executor_factory()
    done = ex.run("fetch-global", "image.fetch", fetch_spec(image_id, served.url), timeout_s=120)
    assert (done["state"], done["reason"]) == (protocol.FAILED, "integrity_failed"), done
    assert "is a tar entry of type b'g'" in done["message"]
    assert not [i for i in docker_client.images.list(all=True) if i.id == image_id]


def test_a_real_save_with_go_pax_headers_is_fetched(executor_factory, peer, docker_client):
    image_id, saved = absent_image(docker_client)
    try:
        served = peer(image_id, with_go_pax_headers(saved, uname="u" * 30_000))
        _, ex = executor_factory()
        done = ex.run("fetch-pax", "image.fetch", fetch_spec(image_id, served.url), timeout_s=120)
        assert done["state"] == protocol.SUCCEEDED, done
        assert docker_client.images.get(image_id).id == image_id
    finally:
        remove_image(docker_client, image_id)


def test_engine_29s_own_save_with_go_pax_headers_loads_into_it(engine29, docker_client):
    """The containerd store's save (gzip'd layers, index.json) of an image, each entry after a
    PAX header: received by the real Transfer into the Engine 29 it came from, which runs it."""
    busybox = b"".join(docker_client.api.get_image("faden-test/busybox:1"))
    archive, _ = stacked_image(busybox, marker := uuid.uuid4().hex.encode())
    layout, image_id = containerd_layout(archive, name=f"faden-pax/gz-{uuid.uuid4().hex[:8]}:1", nested=False)
    with closing(engine29.client()) as client:
        api = client.api
        api.load_image(layout)
        saved = b"".join(api.get_image(image_id))  # the engine's own save
        api.remove_image(image_id, force=True)
        served = scripted(honest(image_id, with_go_pax_headers(saved)))
        try:
            started = time.monotonic()
            transfer = Transfer(api, image_id, "faden-pax/back:1", False, lambda f: None, lambda: False, 1 << 30)
            result = transfer.run({"address": served.url, "ticket": "t" * 32})
        finally:
            served.close()
        print(f"29's own save with PAX headers: {result} in {time.monotonic() - started:.1f} s")
        assert result["engine_image_id"] == image_id
        try:
            runs_with(api, "faden-pax/back:1", marker)
        finally:
            api.remove_image(image_id, force=True)
