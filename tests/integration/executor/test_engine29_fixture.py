"""The Engine 29 of the tests is what a fresh Docker 29 install is: API 1.52 with a minimum
of 1.44, the containerd image store, the test image loaded, containers run on its bridge."""

from __future__ import annotations

from contextlib import closing

import docker
import pytest

from tests.conftest import TEST_IMAGE


def test_engine29_is_a_fresh_docker29(engine29) -> None:
    with closing(engine29.client()) as client:
        version = client.version()
        assert (version["Version"], version["ApiVersion"], version["MinAPIVersion"]) == ("29.1.5", "1.52", "1.44")
        assert ["driver-type", "io.containerd.snapshotter.v1"] in client.info()["DriverStatus"]
        assert client.containers.run(TEST_IMAGE, ["echo", "hi"], remove=True) == b"hi\n"
    with closing(docker.DockerClient(base_url=engine29.host, version="1.41", timeout=30)) as old:
        with pytest.raises(docker.errors.APIError, match="client version 1.41 is too old"):
            old.version(api_version=True)
