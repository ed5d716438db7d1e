"""The OCI image layout of `docker save` on Engine 25+ (classic store and containerd store):
blobs named by their sha256, an image found from an id that names its config, its manifest
or an index of manifests; a layer blob's uncompressed sha256 (its diff id) computed as it
streams past.
"""

from __future__ import annotations

import hashlib
import re
import zlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import orjson

BLOB_PATH = re.compile(r"blobs/sha256/([0-9a-f]{64})")
GZIP_MAGIC = b"\x1f\x8b"
ZSTD_MAGIC = b"\x28\xb5\x2f\xfd"
INFLATE_STEP = 1 << 20  # zlib output per call: a bomb never sits in memory

INDEX_TYPES = ("application/vnd.oci.image.index.v1+json", "application/vnd.docker.distribution.manifest.list.v2+json")
MANIFEST_TYPE = "application/vnd.oci.image.manifest.v1+json"
CONFIG_TYPE = "application/vnd.oci.image.config.v1+json"
LAYER_TYPES = {"none": "application/vnd.oci.image.layer.v1.tar", "gzip": "application/vnd.oci.image.layer.v1.tar+gzip"}
OCI_LAYOUT = b'{"imageLayoutVersion":"1.0.0"}'
# the names an index.json entry gives an image (containerd's and the OCI spec's)
NAME_ANNOTATIONS = ("io.containerd.image.name", "org.opencontainers.image.ref.name")


class BlobError(Exception):
    """A blob that is not what its name or its compression says."""


class BlobDigests:
    """The sha256 of a blob's bytes and of its uncompressed content (gzip read here; zstd
    is named, not read). `on_inflated(n)` counts every uncompressed byte (a bound)."""

    def __init__(self, on_inflated: Callable[[int], None]):
        self.raw = hashlib.sha256()
        self.plain: Any = None
        self.compression: str | None = None
        self.head = b""
        self.inflater: Any = None
        self.on_inflated = on_inflated

    def update(self, chunk: bytes) -> None:
        self.raw.update(chunk)
        if self.compression is None:
            self.head += chunk  # under 4 bytes until the compression is known
            if len(self.head) < 4:
                return
            self._start(self.head[:4])
            chunk, self.head = self.head, b""
        if self.compression == "gzip":
            self._inflate(chunk)

    def _start(self, head: bytes) -> None:
        if head.startswith(GZIP_MAGIC):
            self.compression, self.plain = "gzip", hashlib.sha256()
            self.inflater = zlib.decompressobj(16 + zlib.MAX_WBITS)
        elif head.startswith(ZSTD_MAGIC):
            self.compression = "zstd"
        else:
            self.compression = "none"

    def _inflate(self, data: bytes) -> None:
        while data:
            try:
                out = self.inflater.decompress(data, INFLATE_STEP)
            except zlib.error as exc:
                raise BlobError(f"not valid gzip ({exc})") from None
            self.plain.update(out)
            self.on_inflated(len(out))
            if self.inflater.eof:  # a gzip of several members: the next begins
                data = self.inflater.unused_data
                self.inflater = zlib.decompressobj(16 + zlib.MAX_WBITS) if data else self.inflater
            else:
                data = self.inflater.unconsumed_tail

    def finish(self) -> tuple[str, str | None, str]:
        """(sha256 of the bytes, sha256 of the uncompressed content or None, compression)."""
        if self.compression is None:  # under 4 bytes: no compression fits
            self._start(self.head)
        raw = "sha256:" + self.raw.hexdigest()
        if self.compression == "none":
            return raw, raw, "none"
        if self.compression == "gzip":
            if not self.inflater.eof:
                raise BlobError("the gzip stream ends early")
            return raw, "sha256:" + self.plain.hexdigest(), "gzip"
        return raw, None, str(self.compression)


@dataclass
class Blob:
    size: int
    diff_id: str | None  # sha256 of the uncompressed content; None: a compression not read here
    compression: str
    content: bytes | None  # kept when small (metadata: index, manifest, config)


@dataclass
class Layer:
    blob: str | None  # "sha256:<hex>" of the blob that holds it (None: not known, the receiver holds it)
    diff_id: str


@dataclass
class Resolved:
    """The image an id names, found in an OCI layout: its config, its layers base first, and
    the descriptor index.json must point to (the image's own manifest or index)."""

    config_digest: str
    config: dict[str, Any]
    layers: list[Layer]
    target: dict[str, Any] | None  # None: the id names a config; a manifest is made for it
    extra_blobs: set[str]  # every other blob the image refers to (manifests of other platforms)


def as_json(content: bytes, what: str) -> Any:
    try:
        return orjson.loads(content)
    except orjson.JSONDecodeError:
        raise BlobError(f"{what} is not JSON") from None


def kind_of(document: Any) -> str:
    """index, manifest or config (what a JSON blob is), or other."""
    if not isinstance(document, dict):
        return "other"
    if isinstance(document.get("manifests"), list):
        return "index"
    if isinstance(document.get("layers"), list) and isinstance(document.get("config"), dict):
        return "manifest"
    if isinstance(document.get("rootfs"), dict):
        return "config"
    return "other"


def diff_ids_of(config: dict[str, Any]) -> list[str]:
    diff_ids = (config.get("rootfs") or {}).get("diff_ids") or []
    if not isinstance(diff_ids, list) or not all(isinstance(d, str) for d in diff_ids):
        raise BlobError("the image config's rootfs.diff_ids is not a list of digests")
    return diff_ids


def descriptor_digest(descriptor: Any, what: str) -> str:
    digest = descriptor.get("digest") if isinstance(descriptor, dict) else None
    if not isinstance(digest, str) or not re.fullmatch(r"sha256:[0-9a-f]{64}", digest):
        raise BlobError(f"{what} names no sha256 digest")
    return digest


def pick_manifest(index: dict[str, Any], blobs: dict[str, Blob], platform: tuple[str, str]) -> dict[str, Any]:
    """The index's manifest for `platform` (os, architecture) whose blob the archive holds."""
    held = []
    for entry in index["manifests"]:
        digest = descriptor_digest(entry, "an index entry")
        if digest in blobs:
            held.append(entry)
    for entry in held:
        plat = entry.get("platform") or {}
        if (plat.get("os"), plat.get("architecture")) == platform:
            return entry
    unnamed = [e for e in held if not e.get("platform")]  # an index that names no platforms
    if len(unnamed) == 1:
        return unnamed[0]
    raise BlobError(f"the index holds no manifest for {platform[0]}/{platform[1]} that the archive carries")


def resolve(
    image_id: str,
    blobs: dict[str, Blob],
    docker_manifest: dict[str, Any] | None,
    platform: tuple[str, str],
) -> Resolved:
    """The image `image_id` names (its config, manifest or index digest), from the blobs."""
    document = _document(blobs, image_id, "the image")
    kind = kind_of(document)
    target: dict[str, Any] | None = None
    extra: set[str] = set()
    if kind == "index":
        target = {"mediaType": document.get("mediaType") or INDEX_TYPES[0], "digest": image_id}
        extra = {descriptor_digest(e, "an index entry") for e in document["manifests"]}
        entry = pick_manifest(document, blobs, platform)
        manifest_digest = descriptor_digest(entry, "an index entry")
        document = _document(blobs, manifest_digest, "the platform's manifest")
        if kind_of(document) != "manifest":
            raise BlobError(f"index entry {manifest_digest[:19]} is not an image manifest")
        kind = "manifest"
    if kind == "manifest":
        if target is None:
            target = {"mediaType": document.get("mediaType") or MANIFEST_TYPE, "digest": image_id}
        config_digest = descriptor_digest(document["config"], "the manifest's config")
        config = _document(blobs, config_digest, "the image config")
        diff_ids = diff_ids_of(config)
        if len(document["layers"]) != len(diff_ids):
            raise BlobError("the manifest lists another number of layers than the image config")
        layers = [
            Layer(descriptor_digest(d, "a manifest layer"), diff_id)
            for d, diff_id in zip(document["layers"], diff_ids, strict=True)
        ]
        return Resolved(config_digest, config, layers, target, extra)
    if kind == "config":
        diff_ids = diff_ids_of(document)
        paths = _docker_manifest_layers(docker_manifest, image_id, len(diff_ids))
        layers = [Layer(p, d) for p, d in zip(paths, diff_ids, strict=True)]
        return Resolved(image_id, document, layers, None, extra)
    raise BlobError(f"blob {image_id[:19]} is no image index, manifest or config")


def _document(blobs: dict[str, Blob], digest: str, what: str) -> Any:
    blob = blobs.get(digest)
    if blob is None:
        raise BlobError(f"the archive holds no blob of {what} ({digest[:19]}): a different image, or cut short")
    if blob.content is None:
        raise BlobError(f"{what} ({digest[:19]}) is {blob.size} bytes: too large for metadata")
    return as_json(blob.content, what)


def _docker_manifest_layers(docker_manifest: dict[str, Any] | None, config_digest: str, count: int) -> list[str]:
    """The layer blobs manifest.json lists for the image whose config the id names."""
    if docker_manifest is None:
        raise BlobError("the archive has no manifest.json (cut short?)")
    if docker_manifest.get("Config") != "blobs/sha256/" + config_digest.removeprefix("sha256:"):
        raise BlobError(f"manifest.json names config {str(docker_manifest.get('Config'))[:100]}, not {config_digest}")
    paths = docker_manifest.get("Layers")
    if not isinstance(paths, list) or len(paths) != count:
        raise BlobError("manifest.json lists another number of layers than the image config")
    digests = []
    for path in paths:
        match = BLOB_PATH.fullmatch(str(path))
        if match is None:
            raise BlobError(f"manifest.json lists layer {str(path)[:100]} outside blobs/sha256")
        digests.append("sha256:" + match.group(1))
    return digests


def made_manifest(resolved: Resolved, blobs: dict[str, Blob], config_size: int) -> bytes:
    """An OCI manifest for an image named by its config (the 20.10 shape, the classic
    store's layout): what index.json points a containerd-store receiver to. A layer the
    receiver holds (not in the archive) is described as its uncompressed tar."""
    layers = []
    for layer in resolved.layers:
        blob = blobs.get(layer.blob or "")
        if blob is not None and layer.blob is not None:
            layers.append({"mediaType": LAYER_TYPES[blob.compression], "digest": layer.blob, "size": blob.size})
        else:
            layers.append({"mediaType": LAYER_TYPES["none"], "digest": layer.diff_id, "size": 0})
    return orjson.dumps(
        {
            "schemaVersion": 2,
            "mediaType": MANIFEST_TYPE,
            "config": {"mediaType": CONFIG_TYPE, "digest": resolved.config_digest, "size": config_size},
            "layers": layers,
        }
    )


def index_json(target: dict[str, Any], size: int) -> bytes:
    """index.json naming nothing (the receiver tags): one entry, the image's manifest or index."""
    return orjson.dumps(
        {
            "schemaVersion": 2,
            "mediaType": INDEX_TYPES[0],
            "manifests": [{"mediaType": target["mediaType"], "digest": target["digest"], "size": size}],
        }
    )


def names_in_index(index: Any) -> list[str]:
    """The image names an index.json's entries carry (what a containerd load would tag)."""
    names = []
    for entry in index.get("manifests") or [] if isinstance(index, dict) else []:
        annotations = entry.get("annotations") if isinstance(entry, dict) else None
        if isinstance(annotations, dict) and isinstance(annotations.get(NAME_ANNOTATIONS[0]), str):
            names.append(annotations[NAME_ANNOTATIONS[0]])
    return names


def familiar(name: str) -> str:
    """docker.io/library/busybox:1 -> busybox:1 (how the engine shows a name)."""
    for prefix in ("docker.io/library/", "docker.io/"):
        if name.startswith(prefix):
            return name.removeprefix(prefix)
    return name
