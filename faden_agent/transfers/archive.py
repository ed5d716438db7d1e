"""Image archives between peers: the `docker save` tar stream, read and written
entry by entry, never held whole.
"""

from __future__ import annotations

import hashlib
import io
import re
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

import orjson

from faden_agent.transfers.oci import (
    BLOB_PATH,
    MANIFEST_TYPE,
    OCI_LAYOUT,
    Blob,
    BlobDigests,
    BlobError,
    Layer,
    Resolved,
    diff_ids_of,
    familiar,
    index_json,
    made_manifest,
    names_in_index,
    resolve,
)
from faden_agent.transfers.tarstream import Data, Member, TarRefused, header, members, padding

CHUNK = 1 << 20
META_LIMIT = 4 << 20  # manifest, config, v1 json, repositories: small files, read into memory
MAX_ENTRIES = 4096  # a docker save archive has ~4 entries per layer
HEX64 = re.compile(r"[0-9a-f]{64}")
# Metadata blobs of an OCI layout (index, manifests, config) are read into memory: each at
# most META_LIMIT, all of them together at most META_KEPT_LIMIT (bigger blobs are layers).
META_KEPT_LIMIT = 16 << 20
# A gzip'd layer is unpacked to check its diff id: all of them together unpack to at most
# this many times the archive's byte bound (a gzip bomb is cut, not hashed for hours).
INFLATE_FACTOR = 16
OWN_FILES = ("manifest.json", "repositories", "index.json", "oci-layout")
# The container_config docker 20.10 marshals for every layer but the last (Go field order).
_EMPTY_CONTAINER_CONFIG = (
    '{"Hostname":"","Domainname":"","User":"","AttachStdin":false,"AttachStdout":false,'
    '"AttachStderr":false,"Tty":false,"OpenStdin":false,"StdinOnce":false,"Env":null,"Cmd":null,'
    '"Image":"","Volumes":null,"WorkingDir":"","Entrypoint":null,"OnBuild":null,"Labels":null}'
)


class IntegrityError(Exception):
    """The stream is not the image it claims to be (or not a well-formed image archive)."""


def sha256_hex(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def chain_ids(diff_ids: list[str]) -> list[str]:
    """The chain id of every prefix of a layer list (how the engine names a layer stack)."""
    chains: list[str] = []
    for diff_id in diff_ids:
        chains.append(diff_id if not chains else "sha256:" + sha256_hex(f"{chains[-1]} {diff_id}".encode()))
    return chains


def v1_layer_ids(diff_ids: list[str]) -> list[str]:
    """The directory names `docker save` gives every layer but the last (hex, no prefix)."""
    ids: list[str] = []
    parent = ""
    for chain in chain_ids(diff_ids)[:-1]:
        body = (
            f'{{"container_config":{_EMPTY_CONTAINER_CONFIG},"created":"1970-01-01T00:00:00Z",'
            f'"layer_id":"{chain}"' + (f',"parent":"sha256:{parent}"' if parent else "") + "}"
        )
        parent = sha256_hex(body.encode())
        ids.append(parent)
    return ids


def held_prefix(diff_ids: list[str], held_chains: set[str]) -> int:
    """How many base layers the receiver holds (the longest prefix whose chain it has)."""
    count = 0
    for i, chain in enumerate(chain_ids(diff_ids)):
        if chain in held_chains:
            count = i + 1
    return count


class ChunkReader(io.RawIOBase):
    """A file object over an iterator of byte chunks (an HTTP body, a docker save stream)."""

    def __init__(self, chunks: Iterable[bytes]):
        self._chunks = iter(chunks)
        self._buffer = b""

    def readable(self) -> bool:
        return True

    def readinto(self, target: Any) -> int:
        while not self._buffer:
            try:
                self._buffer = next(self._chunks)
            except StopIteration:
                return 0
        n = min(len(target), len(self._buffer))
        target[:n] = self._buffer[:n]
        self._buffer = self._buffer[n:]
        return n


class Limited(io.RawIOBase):
    """Every byte read from `source` counted (headers and padding too); IntegrityError past `limit`."""

    def __init__(self, source: io.RawIOBase, limit: int, on_bytes: Callable[[int], None]):
        self.source, self.limit, self.on_bytes = source, limit, on_bytes
        self.count = 0

    def readable(self) -> bool:
        return True

    def readinto(self, target: Any) -> int:
        n = self.source.readinto(target) or 0
        self.count += n
        if self.count > self.limit:
            raise IntegrityError(f"the archive is larger than the {self.limit} bytes this image may have")
        self.on_bytes(n)
        return n


def entries(source: io.RawIOBase) -> Iterator[tuple[Member, Data]]:
    """Each (member, its data) of a docker save tar stream, in order (tarstream.py:
    only what an engine's save holds); read the data before asking for the next one."""
    try:
        yield from members(source)
    except TarRefused as exc:
        raise IntegrityError(str(exc)) from None


END_OF_ARCHIVE = b"\0" * 1024


def copy_entry(member: Member, data: Data, on_chunk: Callable[[bytes], None] | None = None) -> Iterator[bytes]:
    """One entry written afresh: its header from its fields, data in CHUNK pieces, padding."""
    yield header(member)
    left = member.size
    while left > 0:
        chunk = data.read(min(CHUNK, left))
        if not chunk:
            raise IntegrityError(f"the archive ends inside {member.name[:200]}")
        left -= len(chunk)
        if on_chunk is not None:
            on_chunk(chunk)
        yield chunk
    yield padding(member.size)


def strip_held_layers(source: io.RawIOBase, skip_names: set[str]) -> Iterator[bytes]:
    """The holder's stream: the save archive without the layer files named in `skip_names`
    (`<dir>/layer.tar` of 20.10, `blobs/sha256/<hex>` of 25+)."""
    for member, data in entries(source):
        if member.name in skip_names and member.isfile():
            continue  # its data is skipped when the next member is asked for
        yield from copy_entry(member, data)
    yield END_OF_ARCHIVE


@dataclass
class ArchiveVerifier:
    """The receiver's check of one archive of any shape (docker save of 20.10; the OCI
    layout of 25+, classic or containerd store): `image_id` expected (a config, manifest or
    index digest), `reference` the only tag it may carry, `held_chains` the layer chains the
    local engine holds, `platform` the engine's (os, architecture) for an index."""

    image_id: str
    reference: str | None
    held_chains: set[str]
    byte_limit: int
    on_bytes: Callable[[int], None] = lambda n: None
    platform: tuple[str, str] = ("linux", "amd64")
    layer_digests: dict[str, str] = field(default_factory=dict)  # "<dir>/layer.tar" -> sha256:...
    layer_sizes: dict[str, int] = field(default_factory=dict)
    links: dict[str, str] = field(default_factory=dict)  # "<dir>/layer.tar" -> the layer file it links to
    blobs: dict[str, Blob] = field(default_factory=dict)  # "sha256:<hex>" -> blobs/sha256/<hex>
    meta: dict[str, bytes] = field(default_factory=dict)  # manifest.json, repositories, index.json, oci-layout
    config: bytes | None = None  # 20.10's <hex>.json
    seen: set[str] = field(default_factory=set)
    received: int = 0
    kept: int = 0  # bytes of blobs kept in memory (metadata)
    inflated: int = 0  # uncompressed bytes of gzip'd blobs
    diff_ids: list[str] = field(default_factory=list)  # the image's layers, once verified
    layers_received: int = 0  # of them, how many the archive carried (the others are held here)
    engine_ids: list[str] = field(default_factory=list)  # the ids a receiving engine may give it

    def verified(self, source: io.RawIOBase) -> Iterator[bytes]:
        """The archive to hand to the engine: checked entries, then our own manifest.json
        and index.json. Every byte of the stream counts against byte_limit."""
        counted = Limited(source, self.byte_limit, self._count)
        try:
            for member, data in entries(counted):
                yield from self._entry(member, data)
            yield from self._finish()
        except BlobError as exc:
            raise IntegrityError(str(exc)) from None

    def _count(self, n: int) -> None:
        self.received += n
        self.on_bytes(n)

    def _inflated(self, n: int) -> None:
        self.inflated += n
        if self.inflated > self.byte_limit * INFLATE_FACTOR:
            raise IntegrityError(f"the layers unpack to more than {self.byte_limit * INFLATE_FACTOR} bytes")

    def _entry(self, member: Member, data: Data) -> Iterator[bytes]:
        name = member.name.rstrip("/") if member.isdir() else member.name
        if len(self.seen) >= MAX_ENTRIES:
            raise IntegrityError(f"the archive has more than {MAX_ENTRIES} entries")
        if name in self.seen:
            raise IntegrityError(f"the archive holds {name[:200]} twice")
        self.seen.add(name)
        directory, slash, leaf = name.partition("/")
        blob = BLOB_PATH.fullmatch(name)
        if member.isdir() and (HEX64.fullmatch(name) or name in ("blobs", "blobs/sha256")):
            yield header(member)
        elif blob is not None and member.isfile():
            yield from self._blob(member, data, "sha256:" + blob.group(1))
        elif slash and HEX64.fullmatch(directory) and leaf == "layer.tar" and member.issym():
            target = re.fullmatch(r"\.\./([0-9a-f]{64})/layer\.tar", member.linkname)
            if target is None:
                raise IntegrityError(f"{name} links outside the archive's layers ({member.linkname[:200]})")
            self.links[name] = f"{target.group(1)}/layer.tar"
            yield header(member)
        elif slash and HEX64.fullmatch(directory) and leaf == "layer.tar" and member.isfile():
            digest = hashlib.sha256()

            yield from copy_entry(member, data, digest.update)
            self.layer_digests[name] = "sha256:" + digest.hexdigest()
            self.layer_sizes[name] = member.size
        elif slash and HEX64.fullmatch(directory) and leaf in ("VERSION", "json") and member.isfile():
            yield from copy_entry(member, data)
        elif member.isfile() and name == self.image_id.removeprefix("sha256:") + ".json":
            self.config = self._small(member, data)
            if "sha256:" + sha256_hex(self.config) != self.image_id:
                raise IntegrityError(f"the image config does not hash to {self.image_id}: not the image asked for")
            yield header(member) + self.config + padding(member.size)
        elif member.isfile() and name in OWN_FILES:
            self.meta[name] = self._small(member, data)  # ours replaces it at the end
        elif member.isfile() and re.fullmatch(r"[0-9a-f]{64}\.json", name):
            raise IntegrityError(f"the archive holds image config {name[:80]}, not {self.image_id}: a different image")
        else:
            raise IntegrityError(f"unexpected entry in the image archive: {name[:200]} (a {member.kind})")

    def _blob(self, member: Member, data: Data, digest: str) -> Iterator[bytes]:
        """A blob passed on while hashed (and, gzip'd, unpacked and hashed); kept in memory
        when small enough to be metadata, within META_KEPT_LIMIT for all of them."""
        digests = BlobDigests(self._inflated)
        # JSON only: small layers (a tar, a gzip) never use up what the metadata may keep
        keep = [member.size <= META_LIMIT and self.kept + member.size <= META_KEPT_LIMIT]
        content = bytearray()

        def on_chunk(chunk: bytes) -> None:
            digests.update(chunk)
            if keep[0] and not content and not chunk[:64].lstrip().startswith((b"{", b"[")):
                keep[0] = False
            if keep[0]:
                content.extend(chunk)

        yield from copy_entry(member, data, on_chunk)
        raw, plain, compression = digests.finish()
        if raw != digest:
            raise IntegrityError(f"blob {digest[:19]} hashes to {raw[:19]}: corrupted")
        self.kept += len(content) if keep[0] else 0
        self.blobs[digest] = Blob(member.size, plain, compression, bytes(content) if keep[0] else None)

    def _small(self, member: Member, data: Data) -> bytes:
        if member.size > META_LIMIT:
            raise IntegrityError(f"{member.name[:200]} is {member.size} bytes (metadata is at most {META_LIMIT})")
        return data.read(member.size)

    def _finish(self) -> Iterator[bytes]:
        manifest = self._docker_manifest()
        index = _json(self.meta["index.json"], "index.json") if "index.json" in self.meta else None
        tags = list((manifest or {}).get("RepoTags") or []) + names_in_index(index)
        self._check_tags(tags)
        if self.blobs or index is not None:
            yield from self._finish_layout(manifest)
        else:
            yield from self._finish_v1(manifest)

    def _docker_manifest(self) -> dict[str, Any] | None:
        """manifest.json's one entry (None when the archive has none)."""
        if "manifest.json" not in self.meta:
            return None
        manifest = _json(self.meta["manifest.json"], "manifest.json")
        if not isinstance(manifest, list) or len(manifest) != 1 or not isinstance(manifest[0], dict):
            raise IntegrityError("manifest.json must describe exactly one image")
        return manifest[0]

    def _finish_v1(self, entry: dict[str, Any] | None) -> Iterator[bytes]:
        """docker save of 20.10: <dir>/layer.tar files, <config hex>.json, manifest.json."""
        if self.config is None:
            raise IntegrityError(f"the archive holds no config of {self.image_id}: a different image, or cut short")
        if entry is None:
            raise IntegrityError("the archive has no manifest.json (cut short?)")
        diff_ids = diff_ids_of(_json(self.config, "config"))
        if entry.get("Config") != self.image_id.removeprefix("sha256:") + ".json":
            raise IntegrityError(f"manifest.json names config {str(entry.get('Config'))[:100]}, not {self.image_id}")
        paths = entry.get("Layers")
        if not isinstance(paths, list) or len(paths) != len(diff_ids):
            raise IntegrityError("manifest.json lists another number of layers than the image config")
        layers = []
        for path, diff_id in zip(paths, diff_ids, strict=True):
            digest = self.layer_digests.get(self.links.get(path, path))
            layers.append(Layer(digest, diff_id))
            if digest is not None:  # an uncompressed tar: its digest is its diff id
                self.blobs.setdefault(digest, Blob(self.layer_sizes[self.links.get(path, path)], digest, "none", None))
        listed = set(paths)
        extra = [p for p in list(self.layer_digests) + list(self.links) if p not in listed]
        if extra:
            raise IntegrityError(f"the archive holds layers the image does not use: {extra[0][:80]}")
        self.blobs.setdefault(self.image_id, Blob(len(self.config), None, "none", self.config))
        resolved = Resolved(self.image_id, {}, layers, None, set())
        yield from self._emit(resolved, str(entry["Config"]), [str(p) for p in paths])

    def _finish_layout(self, entry: dict[str, Any] | None) -> Iterator[bytes]:
        """The OCI image layout of 25+ (classic or containerd store)."""
        if self.layer_digests or self.links or self.config is not None:
            raise IntegrityError("the archive mixes 20.10's layer folders with an OCI layout")
        if "oci-layout" in self.meta:
            layout = _json(self.meta["oci-layout"], "oci-layout")
            if not isinstance(layout, dict) or layout.get("imageLayoutVersion") != "1.0.0":
                raise IntegrityError(f"oci-layout names version {str(layout)[:60]}, not 1.0.0")
        resolved = resolve(self.image_id, self.blobs, entry, self.platform)
        used = {resolved.config_digest, *resolved.extra_blobs, *(layer.blob for layer in resolved.layers)}
        if resolved.target is not None:
            used.add(resolved.target["digest"])
        unused = [d for d, blob in self.blobs.items() if d not in used and blob.content is None]
        if unused:
            raise IntegrityError(f"the archive holds blobs the image does not use: {unused[0][:80]}")
        paths = ["blobs/sha256/" + (layer.blob or layer.diff_id).removeprefix("sha256:") for layer in resolved.layers]
        yield from self._emit(resolved, "blobs/sha256/" + resolved.config_digest.removeprefix("sha256:"), paths)

    def _emit(self, resolved: Resolved, config_path: str, paths: list[str]) -> Iterator[bytes]:
        """Each layer checked (its uncompressed digest against the config's diff id, or its
        chain held here); then manifest.json, index.json and oci-layout of our own: the
        classic store loads by the first, the containerd store by the other two."""
        chains = chain_ids([layer.diff_id for layer in resolved.layers])
        for layer, chain in zip(resolved.layers, chains, strict=True):
            blob = self.blobs.get(layer.blob or "")
            if blob is None:
                if chain not in self.held_chains:
                    raise IntegrityError(f"layer {layer.diff_id} is neither in the archive nor on this machine")
            elif blob.diff_id is None:
                raise IntegrityError(f"layer {str(layer.blob)[:19]} is {blob.compression}-compressed: not checked here")
            elif blob.diff_id != layer.diff_id:
                raise IntegrityError(
                    f"layer {str(layer.blob)[:80]} unpacks to {blob.diff_id}, the image says {layer.diff_id}: corrupted"
                )
        self.diff_ids = [layer.diff_id for layer in resolved.layers]
        self.layers_received = len({layer.blob for layer in resolved.layers if layer.blob in self.blobs})
        config = self.blobs[resolved.config_digest]
        target = resolved.target
        if target is None:  # an image named by its config: a manifest of our own for index.json
            made = made_manifest(resolved, self.blobs, config.size)
            target = {"mediaType": MANIFEST_TYPE, "digest": "sha256:" + sha256_hex(made)}
            if target["digest"] not in self.blobs:
                yield _file("blobs/sha256/" + target["digest"].removeprefix("sha256:"), made)
            self.blobs.setdefault(target["digest"], Blob(len(made), None, "none", made))
        self.engine_ids = list(dict.fromkeys([self.image_id, resolved.config_digest, target["digest"]]))
        yield _file("manifest.json", orjson.dumps([{"Config": config_path, "RepoTags": None, "Layers": paths}]))
        yield _file("index.json", index_json(target, self.blobs[target["digest"]].size))
        yield _file("oci-layout", OCI_LAYOUT)
        yield END_OF_ARCHIVE

    def _check_tags(self, tags: list[Any]) -> None:
        named = [familiar(str(t)) for t in tags]
        if "repositories" in self.meta:
            repos = _json(self.meta["repositories"], "repositories")
            if not isinstance(repos, dict):
                raise IntegrityError("repositories is not an object")
            named += [f"{repo}:{tag}" for repo, by_tag in repos.items() for tag in (by_tag or {})]
        foreign = [t for t in named if t != familiar(self.reference or "")]
        if foreign:
            raise IntegrityError(f"the archive would tag {foreign[0][:200]}: refused (only the receiver tags)")


def _json(content: bytes, what: str) -> Any:
    try:
        return orjson.loads(content)
    except orjson.JSONDecodeError:
        raise IntegrityError(f"{what} is not JSON") from None


def _file(name: str, content: bytes) -> bytes:
    """One regular file entry of our own: header, content, padding."""
    return header(Member(name, "file", len(content))) + content + padding(len(content))
