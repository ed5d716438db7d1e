"""The Docker section against the real engine: images and managed containers appear and
disappear as they are created and removed, GPU assignment is read from device requests,
unmanaged containers stay out, and the change watcher sees Docker events as they happen."""

from __future__ import annotations

import shutil
import tempfile
import threading
import time
import uuid
from pathlib import Path

import docker
import pytest

from faden_agent import protocol
from faden_agent.config import load_config
from faden_agent.engine.versions import CLIENT_MAX_API
from faden_agent.workers.inventory.changes import DockerChangeWatcher, is_change
from faden_agent.workers.inventory.collector import Collector, DockerProbe
from faden_agent.workers.inventory.record import content_hash
from faden_agent.workers.threads import start_daemon
from tests.conftest import ENGINE_UNDER_TEST, TEST_IMAGE
from tests.support.agentproc import wait_for
from tests.support.privateengine import PrivateEngine

pytestmark = pytest.mark.docker

PREFIX = "faden-inv-test-"


@pytest.fixture
def unique(docker_client):
    """A unique name prefix; every container and image tag with it is removed afterwards."""
    name = PREFIX + uuid.uuid4().hex[:8]
    yield name
    for container in docker_client.containers.list(all=True, filters={"name": name}):
        container.remove(force=True)
    for image in docker_client.images.list():
        for tag in image.tags:
            if tag.startswith(f"{name}/"):
                docker_client.images.remove(tag)


def managed(docker_client, name, **kwargs):
    labels = {protocol.LABEL_MANAGED: "true", protocol.LABEL_CLUSTER: "c-1", "other.label": "x"}
    return docker_client.containers.create(TEST_IMAGE, ["sleep", "300"], name=name, labels=labels, **kwargs)


def test_engine_facts(docker_client):
    section = DockerProbe(None)()
    version = docker_client.version()
    info = docker_client.info()
    assert section["engine_version"] == version["Version"]
    # the version in use: the highest both sides speak; and the engine's own range
    assert section["api_version"] == min(
        version["ApiVersion"], CLIENT_MAX_API, key=lambda v: tuple(map(int, v.split(".")))
    )
    assert (section["engine_api_min"], section["engine_api_max"]) == (version["MinAPIVersion"], version["ApiVersion"])
    store = "containerd" if ["driver-type", "io.containerd.snapshotter.v1"] in info["DriverStatus"] else "classic"
    assert section["image_store"] == store == {"20.10": "classic", "29": "containerd"}[ENGINE_UNDER_TEST]
    assert section["storage_driver"] == info["Driver"] and section["data_root"] == info["DockerRootDir"]
    assert section["runtimes"] == sorted(info["Runtimes"])
    assert section["nvidia_runtime"] is ("nvidia" in info["Runtimes"])


def test_the_probe_keeps_its_version_but_no_connection_between_rounds(docker_client):
    """Each round runs on a new thread, and a connection belongs to the thread that opened it:
    one left open would stay open for good, one more each round."""
    probe = DockerProbe(None)
    for _ in range(3):
        thread = threading.Thread(target=probe)
        thread.start()
        thread.join(60)
    assert probe._client is not None and probe._client.engine is not None
    assert not probe._client.http._open


def test_images_appear_and_disappear(docker_client, unique):
    probe = DockerProbe(None)
    reference = f"{unique}/busybox:probe"
    test_image = docker_client.images.get(TEST_IMAGE)
    assert not any(reference in i["references"] for i in probe()["images"])
    test_image.tag(reference)
    entry = next(i for i in probe()["images"] if reference in i["references"])
    # the listing's size: on the containerd store (Engine 29) content and unpacked snapshot
    # together, more than the inspected image's own Size
    listed = next(i for i in docker_client.api.images() if i["Id"] == test_image.id)
    assert entry["id"] == test_image.id and entry["size"] == listed["Size"] >= test_image.attrs["Size"]
    assert TEST_IMAGE in entry["references"]
    # what an id is: the config digest on the classic store (never a manifest's digest), the
    # manifest's digest on the containerd store (the one its own RepoDigests name)
    named_by_manifest = any(d.endswith("@" + entry["id"]) for d in entry["digests"])
    assert named_by_manifest is (ENGINE_UNDER_TEST == "29"), entry
    # the layer list a backend compares to choose a peer holder
    assert entry["layers"] == test_image.attrs["RootFS"]["Layers"] and entry["layers"]
    assert all(layer.startswith("sha256:") for layer in entry["layers"])
    docker_client.images.remove(reference)
    assert not any(reference in i["references"] for i in probe()["images"])


def test_managed_containers_appear_with_state_and_gpus_and_disappear(docker_client, unique):
    probe = DockerProbe(None)
    with_gpus = managed(
        docker_client,
        f"{unique}-gpu",
        device_requests=[docker.types.DeviceRequest(device_ids=["0", "2"], capabilities=[["gpu"]])],
    )
    running = managed(docker_client, f"{unique}-cpu")
    running.start()
    unmanaged = docker_client.containers.create(TEST_IMAGE, ["sleep", "300"], name=f"{unique}-plain")

    containers = {c["name"]: c for c in probe()["containers"] if c["name"].startswith(unique)}
    assert set(containers) == {f"{unique}-gpu", f"{unique}-cpu"}  # the unmanaged one is not listed
    gpu, cpu = containers[f"{unique}-gpu"], containers[f"{unique}-cpu"]
    assert gpu["state"] == "created" and cpu["state"] == "running"
    assert gpu["gpus"] == {"source": "device_requests", "count": 2, "device_ids": ["0", "2"]}
    assert cpu["gpus"] is None
    assert cpu["image"] == TEST_IMAGE and cpu["id"] == running.id
    assert cpu["labels"] == {protocol.LABEL_MANAGED: "true", protocol.LABEL_CLUSTER: "c-1"}

    running.kill()
    after_kill = next(c for c in probe()["containers"] if c["name"] == f"{unique}-cpu")
    assert after_kill["state"] == "exited" and after_kill["exit_code"] == 137
    for container in (with_gpus, running, unmanaged):
        container.remove(force=True)
    assert not any(c["name"].startswith(unique) for c in probe()["containers"])


def test_real_events_of_managed_containers_and_images_are_changes_others_not(docker_client, unique):
    start = int(time.time()) - 1
    managed(docker_client, f"{unique}-m").remove()
    docker_client.containers.create(TEST_IMAGE, ["true"], name=f"{unique}-plain").remove()
    docker_client.images.get(TEST_IMAGE).tag(f"{unique}/busybox:events")
    changes: dict[str, list[bool]] = {}
    for event in docker_client.api.events(since=start, until=int(time.time()) + 1, decode=True):
        name = event.get("Actor", {}).get("Attributes", {}).get("name", "")
        if name.startswith(unique):
            changes.setdefault(name, []).append(is_change(event))
    assert changes[f"{unique}-m"] and all(changes[f"{unique}-m"])  # create, destroy
    assert changes[f"{unique}-plain"] and not any(changes[f"{unique}-plain"])
    assert changes[f"{unique}/busybox:events"] == [True]  # tag


def test_the_watcher_calls_back_on_a_managed_container(docker_client, unique):
    seen = threading.Event()
    watcher = DockerChangeWatcher(None, seen.set, threading.Event())
    watcher.start(start_daemon)
    try:
        wait_for(lambda: watcher._stream is not None, 10, what="the events stream")
        managed(docker_client, f"{unique}-w").remove()
        assert seen.wait(5), "no change seen for a managed container"
    finally:
        watcher.stop()
        watcher.thread.join(5)
    assert not watcher.thread.is_alive()


def test_the_first_record_names_the_engines_own_data_root(tmp_path):
    """A private engine whose data root is not /var/lib/docker: the first record's disks
    already measure the engine's own root (a disks probe beside the first Docker probe
    would measure the default one, and the second round send a second full record)."""
    short = Path(tempfile.mkdtemp(prefix="fx-pe-"))  # a Unix socket path has 108 bytes at most
    try:
        with PrivateEngine(short / "engine") as engine:
            config = load_config(
                {}, state_path=tmp_path / "state" / "state.json", runtime_dir=tmp_path / "run", docker_host=engine.host
            )
            collector = Collector(config)
            collector.probes = [p for p in collector.probes if p.name in ("disks", "docker")]
            first = collector.collect()
            data_root = str(short / "engine" / "data")
            assert first["docker"]["data_root"] == data_root
            docker_disk = next(d for d in first["disks"] if "docker" in d["roles"])
            assert docker_disk["paths"][docker_disk["roles"].index("docker")] == data_root
            second = collector.collect()
            assert content_hash(without_probes(second)) == content_hash(without_probes(first))
    finally:
        shutil.rmtree(short, ignore_errors=True)


def without_probes(sections):
    return {k: v for k, v in sections.items() if k != "probes"}
