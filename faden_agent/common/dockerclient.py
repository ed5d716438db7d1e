"""The one place a Docker SDK client is made: the executor, inventory, the peer worker, the
log shipper, prune and `doctor` all call make_client, whose client negotiates its API
version with the engine (faden_agent/common/dockernegotiation.py).
The engine is FADEN_NODE_AGENT_DOCKER_HOST when set, else what the docker CLI would use
(DOCKER_HOST, DOCKER_TLS_VERIFY, DOCKER_CERT_PATH, else the local socket)."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import docker

    from faden_agent.common.dockernegotiation import EngineVersion

DEFAULT_ENGINE_URL = "unix:///var/run/docker.sock"
# /info's DriverStatus entry of an engine whose images live in containerd (Docker 29's default)
CONTAINERD_STORE = ["driver-type", "io.containerd.snapshotter.v1"]


def engine_url(docker_host: str | None) -> str:
    """The engine's address as make_client reaches it, for messages."""
    return docker_host or os.environ.get("DOCKER_HOST") or DEFAULT_ENGINE_URL


def make_client(docker_host: str | None, *, timeout_s: float, max_pool_size: int | None = None) -> docker.DockerClient:
    """A client whose every socket read times out after timeout_s and whose API version is
    negotiated on its first request (nothing is sent here); max_pool_size: connections kept
    for threads that share the client (the SDK's default is 10)."""
    from faden_agent.common.dockernegotiation import NegotiatingClient  # lazily: the SDK costs start time

    options: dict[str, object] = {"timeout": timeout_s}
    if max_pool_size is not None:
        options["max_pool_size"] = max_pool_size
    if docker_host:
        return NegotiatingClient(base_url=docker_host, **options)
    return NegotiatingClient.from_env(**options)


def engine_version(client: docker.DockerClient) -> EngineVersion | None:
    """The negotiated versions of a client made by make_client (negotiating now if not yet)."""
    from faden_agent.common.dockernegotiation import NegotiatingAPIClient

    api = client.api
    if not isinstance(api, NegotiatingAPIClient):
        return None
    return api.engine or api.negotiate()


def image_store(info: dict) -> str:
    """ "containerd" (the containerd image store: images named by manifest digest, saved as
    OCI layouts with gzip'd layers) or "classic" (the graph driver's own store), from /info."""
    status = info.get("DriverStatus") or []
    return "containerd" if CONTAINERD_STORE in [list(pair) for pair in status if isinstance(pair, list)] else "classic"
