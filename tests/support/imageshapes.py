"""`docker save` archives in the shapes no engine here writes, made from a 20.10 archive:
the OCI layout of Engines 25-28 with the classic store (moby's image/tarexport: layers as
uncompressed blobs named by their diff id, a v1 json blob per layer, manifest.json,
repositories), and an OCI layout whose index.json points to a nested image index of gzip'd
layers (what a pulled multi-platform image is; an Engine 29 loads it and saves it itself)."""

from __future__ import annotations

import gzip
import hashlib
import io
import tarfile
from typing import Any

import orjson

OCI_MANIFEST = "application/vnd.oci.image.manifest.v1+json"
OCI_INDEX = "application/vnd.oci.image.index.v1+json"
OCI_CONFIG = "application/vnd.oci.image.config.v1+json"
LAYER = "application/vnd.oci.image.layer.v1.tar"


def digest_of(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


def read_v1(archive: bytes) -> tuple[bytes, list[bytes], list[str]]:
    """(config, layer tars base first, RepoTags) of a 20.10 docker save archive."""
    with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
        entry = orjson.loads(tar.extractfile("manifest.json").read())[0]  # type: ignore[union-attr]
        config = tar.extractfile(entry["Config"]).read()  # type: ignore[union-attr]
        layers = [tar.extractfile(path).read() for path in entry["Layers"]]  # type: ignore[union-attr]
    return config, layers, list(entry.get("RepoTags") or [])


def write_tar(files: list[tuple[str, bytes | None]]) -> bytes:
    """A tar of (name, content) in order; None is a directory."""
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for name, content in files:
            member = tarfile.TarInfo(name)
            if content is None:
                member.type, member.mode = tarfile.DIRTYPE, 0o755
                tar.addfile(member)
            else:
                member.size, member.mode = len(content), 0o644
                tar.addfile(member, io.BytesIO(content))
    return out.getvalue()


def blob(data: bytes) -> tuple[str, bytes]:
    return "blobs/sha256/" + digest_of(data).removeprefix("sha256:"), data


def classic_layout(v1_archive: bytes, tags: list[str] | None = None) -> bytes:
    """The archive an Engine 25-28 with the classic store writes for the image (by id when
    `tags` is None: no names in index.json, no repositories)."""
    config, layers, _ = read_v1(v1_archive)
    diff_ids = [digest_of(layer) for layer in layers]
    files: dict[str, bytes] = {}
    parent = ""
    for i, diff_id in enumerate(diff_ids):  # the v1 json moby writes per layer (a small blob)
        v1 = {"id": f"{i:064x}", "created": "1970-01-01T00:00:00Z", "layer_id": diff_id}
        if parent:
            v1["parent"] = parent
        parent = v1["id"]
        files.update([blob(orjson.dumps(v1))])
        files.update([blob(layers[i])])
    files.update([blob(config)])
    platform = {"architecture": "amd64", "os": "linux"}
    manifest = orjson.dumps(
        {
            "schemaVersion": 2,
            "mediaType": OCI_MANIFEST,
            "config": {"mediaType": OCI_CONFIG, "digest": digest_of(config), "size": len(config), "platform": platform},
            "layers": [
                {"mediaType": LAYER, "digest": d, "size": len(lay)} for d, lay in zip(diff_ids, layers, strict=True)
            ],
        }
    )
    files.update([blob(manifest)])
    descriptors = [
        {
            "mediaType": OCI_MANIFEST,
            "digest": digest_of(manifest),
            "size": len(manifest),
            "platform": platform,
            "annotations": {"io.containerd.image.name": f"docker.io/{tag}", "org.opencontainers.image.ref.name": tag},
        }
        for tag in tags or []
    ]
    top: list[tuple[str, bytes | None]] = [("blobs", None), ("blobs/sha256", None)]
    top += sorted(files.items())
    top.append(("index.json", orjson.dumps({"schemaVersion": 2, "mediaType": OCI_INDEX, "manifests": descriptors})))
    docker_manifest: dict[str, Any] = {
        "Config": "blobs/sha256/" + digest_of(config).removeprefix("sha256:"),
        "RepoTags": tags,
        "Layers": ["blobs/sha256/" + d.removeprefix("sha256:") for d in diff_ids],
    }
    top.append(("manifest.json", orjson.dumps([docker_manifest]) + b"\n"))
    top.append(("oci-layout", b'{"imageLayoutVersion":"1.0.0"}'))
    if tags:
        repos: dict[str, dict[str, str]] = {}
        for tag in tags:
            name, _, version = tag.rpartition(":")
            repos.setdefault(name, {})[version] = diff_ids[-1].removeprefix("sha256:")
        top.append(("repositories", orjson.dumps(repos)))
    return write_tar(top)


def containerd_layout(
    v1_archive: bytes, name: str | None = None, nested: bool = True, compress: Any = None
) -> tuple[bytes, str]:
    """An OCI layout of the image with gzip'd layers, as the containerd store holds a pulled
    image: index.json -> (nested: an image index -> the linux/amd64 manifest, plus an arm64
    entry whose blobs are absent, as a save of one platform has it; else the manifest),
    named `name` in index.json: (archive, the id the store gives it: the index's or the
    manifest's digest)."""
    config, layers, _ = read_v1(v1_archive)
    packed = [(compress or (lambda data: gzip.compress(data, mtime=0)))(layer) for layer in layers]
    manifest = orjson.dumps(
        {
            "schemaVersion": 2,
            "mediaType": OCI_MANIFEST,
            "config": {"mediaType": OCI_CONFIG, "digest": digest_of(config), "size": len(config)},
            "layers": [{"mediaType": LAYER + "+gzip", "digest": digest_of(p), "size": len(p)} for p in packed],
        }
    )
    files = dict([blob(config), blob(manifest), *(blob(p) for p in packed)])
    target = {"mediaType": OCI_MANIFEST, "digest": digest_of(manifest), "size": len(manifest)}
    if nested:
        index = orjson.dumps(
            {
                "schemaVersion": 2,
                "mediaType": OCI_INDEX,
                "manifests": [
                    {**target, "platform": {"architecture": "amd64", "os": "linux"}},
                    {
                        "mediaType": OCI_MANIFEST,
                        "digest": "sha256:" + "ab" * 32,
                        "size": 500,
                        "platform": {"architecture": "arm64", "os": "linux"},
                    },
                ],
            }
        )
        files.update([blob(index)])
        target = {"mediaType": OCI_INDEX, "digest": digest_of(index), "size": len(index)}
    top: list[tuple[str, bytes | None]] = [("blobs", None), ("blobs/sha256", None), *sorted(files.items())]
    if name:
        target["annotations"] = {
            "io.containerd.image.name": f"docker.io/{name}",
            "org.opencontainers.image.ref.name": name.rpartition(":")[2],
        }
    top.append(("index.json", orjson.dumps({"schemaVersion": 2, "mediaType": OCI_INDEX, "manifests": [target]})))
    top.append(
        (
            "manifest.json",
            orjson.dumps([{"Config": files_path(config), "RepoTags": None, "Layers": [files_path(p) for p in packed]}]),
        )
    )
    top.append(("oci-layout", b'{"imageLayoutVersion":"1.0.0"}'))
    return write_tar(top), str(target["digest"])


def files_path(data: bytes) -> str:
    return blob(data)[0]


def synthetic_v1(layers: list[bytes]) -> bytes:
    """A 20.10 docker save archive of an image of `layers` (tars), made without an engine."""
    return stacked_v1(orjson.dumps({"architecture": "amd64", "os": "linux", "config": {}}), layers)[0]


def stacked_image(base_v1_archive: bytes, marker: bytes) -> tuple[bytes, str]:
    """A 20.10 docker save archive (untagged) of a two-layer image: the base archive's
    layers, then one of a single file `marker` (unique per test): (archive, its id)."""
    config, layers, _ = read_v1(base_v1_archive)
    return stacked_v1(config, [*layers, write_tar([("marker", marker)])])


def stacked_v1(config: bytes, layers: list[bytes], diff_ids: list[str] | None = None) -> tuple[bytes, str]:
    """A 20.10 docker save archive of `config` with its diff ids set to `layers`' (or to
    `diff_ids`: an image that lies about its layers)."""
    base = orjson.loads(config)
    base["rootfs"] = {"type": "layers", "diff_ids": diff_ids or [digest_of(layer) for layer in layers]}
    base["history"] = [{"created": "2026-01-01T00:00:00Z"} for _ in layers]
    config = orjson.dumps(base)
    image = digest_of(config).removeprefix("sha256:")
    files: list[tuple[str, bytes | None]] = [(f"{image}.json", config)]
    paths = []
    for i, layer in enumerate(layers):
        folder = f"{i + 1:064x}"
        files += [(folder, None), (f"{folder}/layer.tar", layer), (f"{folder}/VERSION", b"1.0")]
        paths.append(f"{folder}/layer.tar")
    files.append(("manifest.json", orjson.dumps([{"Config": f"{image}.json", "RepoTags": None, "Layers": paths}])))
    return write_tar(files), "sha256:" + image


def runs_with(api: Any, reference: str, marker: bytes) -> None:
    """The engine of `api` runs the image: `cat /marker` prints the marker stacked_image put there."""
    container = api.create_container(reference, ["cat", "/marker"], network_disabled=True)
    try:
        api.start(container)
        assert api.wait(container, timeout=60)["StatusCode"] == 0
        assert api.logs(container, stdout=True, stderr=False).strip() == marker
    finally:
        api.remove_container(container, force=True)
