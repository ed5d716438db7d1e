"""The one place a Docker SDK client is made: the executor, inventory, the peer worker, the
log shipper and `doctor` all call make_client with what they need.

The engine is FADEN_NODE_AGENT_DOCKER_HOST when set, else what the docker CLI would use
(DOCKER_HOST, DOCKER_TLS_VERIFY, DOCKER_CERT_PATH, else the local socket).
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import docker

DEFAULT_ENGINE_URL = "unix:///var/run/docker.sock"


def engine_url(docker_host: str | None) -> str:
    """The engine's address as make_client reaches it, for messages."""
    return docker_host or os.environ.get("DOCKER_HOST") or DEFAULT_ENGINE_URL


def make_client(
    docker_host: str | None, *, timeout_s: float, version: str | None = None, max_pool_size: int | None = None
) -> docker.DockerClient:
    """A client whose every socket read times out after timeout_s. version pins the API
    version (None: asked of the engine here, one request); max_pool_size: connections kept
    for threads that share the client (the SDK's default is 10)."""
    import docker  # lazily: importing the SDK costs start time in processes that never use it

    options: dict[str, object] = {"timeout": timeout_s}
    if version is not None:
        options["version"] = version
    if max_pool_size is not None:
        options["max_pool_size"] = max_pool_size
    if docker_host:
        return docker.DockerClient(base_url=docker_host, **options)
    return docker.from_env(**options)
