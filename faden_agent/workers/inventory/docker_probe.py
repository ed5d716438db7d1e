"""The Docker engine as the backend needs to see it: engine version, the API version in use
and the engine's range, image store, storage, runtimes (is the NVIDIA runtime there?), the
images present (ids as the engine names them: docs/commands.md "Docker engines"), and the
containers this agent manages (by label) with their state, image and GPU assignment."""

from __future__ import annotations

from typing import Any

from faden_agent import protocol
from faden_agent.engine.client import EngineClient, image_store
from faden_agent.engine.errors import NotFound
from faden_agent.protocol.container import describe

# A stuck engine leaves the probe's thread blocked until this socket timeout; the probe's
# own (shorter) timeout reports the overrun long before (see probes.py).
CLIENT_TIMEOUT_S = 60


def probe_docker(engine: EngineClient) -> dict[str, Any]:
    version = engine.version()
    info = engine.info()
    runtimes = sorted((info.get("Runtimes") or {}).keys())
    negotiated = engine.engine_version()
    return {
        "engine_version": version.get("Version"),
        "api_version": negotiated.api_in_use if negotiated else None,
        "engine_api_min": version.get("MinAPIVersion"),
        "engine_api_max": version.get("ApiVersion"),
        "image_store": image_store(info),
        "storage_driver": info.get("Driver"),
        "data_root": info.get("DockerRootDir"),
        "cgroup_version": info.get("CgroupVersion"),
        "runtimes": runtimes,
        "default_runtime": info.get("DefaultRuntime"),
        "nvidia_runtime": "nvidia" in runtimes,
        "images": images(engine),
        "containers": managed_containers(engine),
    }


def images(engine: EngineClient) -> list[dict[str, Any]]:
    """Each image with what a backend needs to choose a peer holder: id, tags,
    repo digests, size and its layers (RootFS diff ids, base first)."""
    found = []
    for image in engine.images():
        refs = [t for t in image.get("RepoTags") or () if t != "<none>:<none>"]
        found.append(
            {
                "id": image["Id"],
                "references": sorted(refs),
                "digests": sorted(d for d in image.get("RepoDigests") or () if not d.startswith("<none>")),
                "size": image.get("Size"),
                "created": image.get("Created"),
                "layers": image_layers(engine, image["Id"]),
            }
        )
    return sorted(found, key=lambda i: i["id"])


def image_layers(engine: EngineClient, image_id: str) -> list[str] | None:
    """The image's diff ids, base first; None when it went away between list and inspect."""
    try:
        return list((engine.inspect_image(image_id).get("RootFS") or {}).get("Layers") or ())
    except NotFound:
        return None


def managed_containers(engine: EngineClient) -> list[dict[str, Any]]:
    found = []
    for summary in engine.containers(all=True, filters=protocol.MANAGED_FILTER):
        try:
            details = engine.inspect_container(summary["Id"])
        except NotFound:
            continue  # removed between the list and the inspect
        found.append(describe(details))
    return sorted(found, key=lambda c: c["name"])
