"""The failures a newcomer meets first, told apart from the engine's raw text, each with what
to do (docs/commands.md, "Failure reasons"): registry_unreachable, image_not_found,
docker_permission. Only the engine's texts are read, matched loosely (lowercase fragments).
"""

from __future__ import annotations

import errno

REGISTRY_UNREACHABLE = "registry_unreachable"
IMAGE_NOT_FOUND = "image_not_found"
DOCKER_PERMISSION = "docker_permission"
NO_SPACE = "no_space"
INVALID_SPEC = "invalid_spec"
NO_SPACE_TEXT = "no space left on device"  # ENOSPC as Go words it, where the engine writes

# The engine's words when the registry's name does not resolve or nothing answers there
# (Go's net package, as dockerd quotes it: `Get "https://host/v2/": dial tcp: ...`).
_UNREACHABLE = (
    "no such host",
    "dial tcp",
    "connection refused",
    "i/o timeout",
    "network is unreachable",
    "no route to host",
    "server misbehaving",
    "tls handshake timeout",
    "client.timeout exceeded",
    "temporary failure in name resolution",
    "connection reset by peer",
)
_BAD_MOUNT = "invalid mount config"
_NOT_FOUND = ("manifest unknown", "not found", "does not exist", "no such image")


def repository_and_tag(image: str) -> tuple[str, str | None]:
    """(repository, tag or digest) of an image reference; None where it names neither (a
    colon followed by a slash belongs to a registry's port: `host:5000/repo`)."""
    if "@" in image:
        repository, _, digest = image.rpartition("@")
        return repository, digest
    repository, colon, tag = image.rpartition(":")
    if colon and "/" not in tag:
        return repository, tag
    return image, None


def registry_of(image: str) -> str:
    """The registry host an image reference names (Docker Hub when none)."""
    repo, _ = repository_and_tag(image)
    first = repo.split("/", 1)[0]
    if "/" in repo and ("." in first or ":" in first or first == "localhost"):
        return first
    return "docker.io"


def engine_reason(text: str) -> str | None:
    """registry_unreachable or image_not_found when the engine's text says so; else None."""
    lowered = text.lower()
    if any(fragment in lowered for fragment in _UNREACHABLE):
        return REGISTRY_UNREACHABLE
    if any(fragment in lowered for fragment in _NOT_FOUND):
        return IMAGE_NOT_FOUND
    return None


def advice(reason: str, image: str | None = None) -> str:
    """What to do about it, in one clause."""
    if reason == REGISTRY_UNREACHABLE:
        where = f"registry {registry_of(image)}" if image else "registry"
        return (
            f"this machine's Docker engine cannot reach the {where}: check the name, DNS and the route "
            "(dockerd's own HTTPS_PROXY when a proxy is needed), or use an image from a registry it reaches"
        )
    if reason == IMAGE_NOT_FOUND:
        where = f" in registry {registry_of(image)}" if image else ""
        return f"no such image or tag{where}: check the repository name and tag (and that it was pushed there)"
    if reason == NO_SPACE:
        return "the Docker engine's disk is full: free space on its data root (image.prune removes unused images)"
    if reason == DOCKER_PERMISSION:
        return (
            "this user may not use the Docker socket: run the agent as root (faden-agent start as root "
            "installs the system service), or add its user to the docker group and log in again"
        )
    return ""


def is_permission_denied(exc: BaseException) -> bool:
    """The socket connection (or the SDK's wrapper of it) failed with EACCES/EPERM."""
    seen: set[int] = set()
    stack: list[object] = [exc]
    while stack:
        item = stack.pop()
        if item is None or id(item) in seen:
            continue
        seen.add(id(item))
        if isinstance(item, PermissionError) or getattr(item, "errno", None) in (errno.EACCES, errno.EPERM):
            return True
        if isinstance(item, BaseException):
            stack += [item.__cause__, item.__context__, *[a for a in item.args if isinstance(a, BaseException)]]
    return False


def failure(what: str, text: str, default: str, image: str | None = None) -> tuple[str, str]:
    """(reason, message) of an engine error. Registry texts are read only when an image is
    being fetched (`image` given), so no other command's error is taken for one."""
    lowered = text.lower()
    if NO_SPACE_TEXT in lowered:
        reason = NO_SPACE
    elif _BAD_MOUNT in lowered:  # "bind source path does not exist" is no missing image
        reason = INVALID_SPEC
    else:
        reason = (engine_reason(text) if image else None) or default
    tip = advice(reason, image)
    return reason, f"{what}: {tip} ({text})" if tip else f"{what}: {text}"
