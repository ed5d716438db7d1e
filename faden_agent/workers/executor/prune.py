"""Which images image.prune removes, and removing them: every image no container uses
(managed or not, running or stopped) and no `keep` entry names, dangling ones included.
Removal is never forced, so the engine itself refuses an image a container started using
meanwhile; such a refusal is listed, not a failure of the command."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import docker


def kept_ids(api: Any, keep: list[str]) -> tuple[set[str], list[str]]:
    """(image ids the keep list names, the entries no image answers to)."""
    ids, absent = set(), []
    for reference in keep:
        try:
            ids.add(api.inspect_image(reference)["Id"])
        except docker.errors.NotFound:
            absent.append(reference)
        except docker.errors.APIError as exc:
            if exc.status_code != 400:  # 400: not a valid reference, so it names no image
                raise
            absent.append(reference)
    return ids, absent


def used_ids(api: Any) -> set[str]:
    """Image ids of every container, in any state."""
    return {container["ImageID"] for container in api.containers(all=True) if container.get("ImageID")}


def with_parents(api: Any, ids: set[str]) -> set[str]:
    """The ids and their parents (images built here have one; untagging it would orphan it)."""
    spared, todo = set(), list(ids)
    while todo:
        image_id = todo.pop()
        if image_id in spared:
            continue
        spared.add(image_id)
        try:
            parent = api.inspect_image(image_id).get("Parent")
        except docker.errors.NotFound:
            continue
        if parent:
            todo.append(parent)
    return spared


def layers_bytes(api: Any) -> int:
    return int(api.df().get("LayersSize") or 0)


def prune(api: Any, keep: list[str], check: Callable[[], None], in_use: Sequence[str] = ()) -> dict[str, Any]:
    """Remove what may go; `check` raises to stop between two images. `in_use`: references
    other commands work with now, spared like `keep` but not reported."""
    kept, absent = kept_ids(api, keep)
    spared = with_parents(api, kept | kept_ids(api, list(in_use))[0] | used_ids(api))
    before = layers_bytes(api)
    removed, refused = [], []
    # newest first: a child before its parent, which then goes with it
    for image in sorted(api.images(), key=lambda i: -int(i.get("Created") or 0)):
        if image["Id"] in spared:
            continue
        check()
        tags = [t for t in image.get("RepoTags") or () if t != "<none>:<none>"]
        try:
            _remove(api, image["Id"], tags + [d for d in image.get("RepoDigests") or () if d != "<none>@<none>"])
        except docker.errors.APIError as exc:
            refused.append({"image_id": image["Id"], "tags": tags, "message": str(exc.explanation or exc)[:300]})
            continue
        removed.append({"image_id": image["Id"], "tags": tags, "size": int(image.get("Size") or 0)})
    return {
        "removed": removed,
        "refused": refused,
        "kept": sorted(kept),
        "keep_absent": absent,
        "bytes_freed": max(0, before - layers_bytes(api)),
    }


def _remove(api: Any, image_id: str, references: list[str]) -> None:
    """Each name first (an id named in two repositories is refused), then the id itself."""
    for reference in references:
        try:
            api.remove_image(reference, force=False)
        except docker.errors.NotFound:
            pass
    try:
        api.remove_image(image_id, force=False)
    except docker.errors.NotFound:
        pass  # its last name was its last reference
