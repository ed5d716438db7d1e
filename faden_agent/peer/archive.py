"""Image archives between peers: the `docker save` tar stream, read and written
entry by entry, never held whole.
Notes (why, figures, history): docs/design-notes.md.
"""

from __future__ import annotations

import hashlib
import io
import re
import tarfile
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

import orjson

CHUNK = 1 << 20
BLOCK = 512
META_LIMIT = 4 << 20  # manifest, config, v1 json, repositories: small files, read into memory
# tarfile reads a PAX or GNU long-name header's data whole into memory, and keeps every
# member it has seen: both are bounded (a docker save archive has ~4 entries per layer and
# names of ~80 bytes).
HEADER_LIMIT = 64 << 10
MAX_ENTRIES = 4096
_HEADER_TYPES = (
    tarfile.XHDTYPE,
    tarfile.XGLTYPE,
    tarfile.SOLARIS_XHDTYPE,
    tarfile.GNUTYPE_LONGNAME,
    tarfile.GNUTYPE_LONGLINK,
)
HEX64 = re.compile(r"[0-9a-f]{64}")
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


class BoundedTarInfo(tarfile.TarInfo):
    """A member whose extended header (PAX, GNU long name or link) is refused past
    HEADER_LIMIT before tarfile reads it into memory."""

    def _proc_member(self, tarfile_: tarfile.TarFile) -> tarfile.TarInfo:
        if self.type in _HEADER_TYPES and self.size > HEADER_LIMIT:
            raise IntegrityError(f"an extended tar header of {self.size} bytes (at most {HEADER_LIMIT})")
        return super()._proc_member(tarfile_)  # type: ignore[misc]


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


def entries(source: io.RawIOBase) -> Iterator[tuple[tarfile.TarInfo, Any]]:
    """Each (member, file object of its data) of a tar stream, in order; read the data
    before asking for the next one. The members tarfile keeps are dropped as it goes."""
    with tarfile.open(fileobj=source, mode="r|", bufsize=CHUNK, tarinfo=BoundedTarInfo) as archive:
        for member in archive:
            yield member, archive.extractfile(member) if member.isfile() else None
            archive.members.clear()  # type: ignore[attr-defined]


def header(member: tarfile.TarInfo) -> bytes:
    return member.tobuf(tarfile.PAX_FORMAT)


def padding(size: int) -> bytes:
    return b"\0" * (-size % BLOCK)


END_OF_ARCHIVE = b"\0" * (2 * BLOCK)


def copy_entry(member: tarfile.TarInfo, data: Any, on_chunk: Callable[[bytes], None] | None = None) -> Iterator[bytes]:
    """One entry re-serialised: header, data in CHUNK pieces, padding."""
    yield header(member)
    left = member.size if data is not None else 0
    while left > 0:
        chunk = data.read(min(CHUNK, left))
        if not chunk:
            raise IntegrityError(f"the archive ends inside {member.name[:200]}")
        left -= len(chunk)
        if on_chunk is not None:
            on_chunk(chunk)
        yield chunk
    yield padding(member.size if data is not None else 0)


def strip_held_layers(source: io.RawIOBase, skip_dirs: set[str]) -> Iterator[bytes]:
    """The holder's stream: the save archive without the layer files of `skip_dirs`."""
    for member, data in entries(source):
        directory, _, leaf = member.name.partition("/")
        if leaf == "layer.tar" and directory in skip_dirs:
            continue  # tarfile skips its data when the next member is asked for
        yield from copy_entry(member, data)
    yield END_OF_ARCHIVE


@dataclass
class ArchiveVerifier:
    """The receiver's check of one archive: `image_id` expected, `reference` the only tag it
    may carry, `held_chains` the layer chains the local engine holds."""

    image_id: str
    reference: str | None
    held_chains: set[str]
    byte_limit: int
    on_bytes: Callable[[int], None] = lambda n: None
    layer_digests: dict[str, str] = field(default_factory=dict)  # "<dir>/layer.tar" -> sha256:...
    links: dict[str, str] = field(default_factory=dict)  # "<dir>/layer.tar" -> the layer file it links to
    config: bytes | None = None
    manifest: bytes | None = None
    repositories: bytes | None = None
    seen: set[str] = field(default_factory=set)
    received: int = 0

    def verified(self, source: io.RawIOBase) -> Iterator[bytes]:
        """The archive to hand to the engine: checked entries, then our own manifest. Every
        byte of the stream counts against byte_limit."""
        counted = Limited(source, self.byte_limit, self._count)
        for member, data in entries(counted):
            yield from self._entry(member, data)
        yield from self._finish()

    def _count(self, n: int) -> None:
        self.received += n
        self.on_bytes(n)

    def _entry(self, member: tarfile.TarInfo, data: Any) -> Iterator[bytes]:
        name = member.name.rstrip("/") if member.isdir() else member.name
        if len(self.seen) >= MAX_ENTRIES:
            raise IntegrityError(f"the archive has more than {MAX_ENTRIES} entries")
        if name in self.seen:
            raise IntegrityError(f"the archive holds {name[:200]} twice")
        self.seen.add(name)
        directory, slash, leaf = name.partition("/")
        if member.isdir() and HEX64.fullmatch(name):
            yield header(member)
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
        elif slash and HEX64.fullmatch(directory) and leaf in ("VERSION", "json") and member.isfile():
            yield from copy_entry(member, data)
        elif member.isfile() and name == self.image_id.removeprefix("sha256:") + ".json":
            self.config = self._small(member, data)
            if "sha256:" + sha256_hex(self.config) != self.image_id:
                raise IntegrityError(f"the image config does not hash to {self.image_id}: not the image asked for")
            yield header(member) + self.config + padding(member.size)
        elif member.isfile() and name in ("manifest.json", "repositories"):
            setattr(self, name.split(".")[0], self._small(member, data))  # ours replaces it at the end
        elif member.isfile() and re.fullmatch(r"[0-9a-f]{64}\.json", name):
            raise IntegrityError(f"the archive holds image config {name[:80]}, not {self.image_id}: a different image")
        else:
            raise IntegrityError(f"unexpected entry in the image archive: {name[:200]} (type {member.type!r})")

    def _small(self, member: tarfile.TarInfo, data: Any) -> bytes:
        if member.size > META_LIMIT:
            raise IntegrityError(f"{member.name[:200]} is {member.size} bytes (metadata is at most {META_LIMIT})")
        return data.read(member.size)

    def _finish(self) -> Iterator[bytes]:
        if self.config is None:
            raise IntegrityError(f"the archive holds no config of {self.image_id}: a different image, or cut short")
        if self.manifest is None:
            raise IntegrityError("the archive has no manifest.json (cut short?)")
        diff_ids = list((_json(self.config, "config").get("rootfs") or {}).get("diff_ids") or [])
        manifest = _json(self.manifest, "manifest.json")
        if not isinstance(manifest, list) or len(manifest) != 1 or not isinstance(manifest[0], dict):
            raise IntegrityError("manifest.json must describe exactly one image")
        entry = manifest[0]
        if entry.get("Config") != self.image_id.removeprefix("sha256:") + ".json":
            raise IntegrityError(f"manifest.json names config {str(entry.get('Config'))[:100]}, not {self.image_id}")
        self._check_tags(entry.get("RepoTags") or [])
        layers = entry.get("Layers")
        if not isinstance(layers, list) or len(layers) != len(diff_ids):
            raise IntegrityError("manifest.json lists another number of layers than the image config")
        chains = chain_ids(diff_ids)
        for path, diff_id, chain in zip(layers, diff_ids, chains, strict=True):
            digest = self.layer_digests.get(self.links.get(path, path))
            if digest is None and chain not in self.held_chains:
                raise IntegrityError(f"layer {diff_id} is neither in the archive nor on this machine")
            if digest is not None and digest != diff_id:
                raise IntegrityError(f"layer {path[:80]} hashes to {digest}, the image says {diff_id}: corrupted")
        listed = set(layers)
        extra = [p for p in list(self.layer_digests) + list(self.links) if p not in listed]
        if extra:
            raise IntegrityError(f"the archive holds layers the image does not use: {extra[0][:80]}")
        own = orjson.dumps([{"Config": entry["Config"], "RepoTags": None, "Layers": layers}])
        yield header(_file_member("manifest.json", len(own))) + own + padding(len(own))
        yield END_OF_ARCHIVE

    def _check_tags(self, tags: list[Any]) -> None:
        named = [str(t) for t in tags]
        if self.repositories is not None:
            repos = _json(self.repositories, "repositories")
            if not isinstance(repos, dict):
                raise IntegrityError("repositories is not an object")
            named += [f"{repo}:{tag}" for repo, by_tag in repos.items() for tag in (by_tag or {})]
        foreign = [t for t in named if t != self.reference]
        if foreign:
            raise IntegrityError(f"the archive would tag {foreign[0][:200]}: refused (only the receiver tags)")


def _json(content: bytes, what: str) -> Any:
    try:
        return orjson.loads(content)
    except orjson.JSONDecodeError:
        raise IntegrityError(f"{what} is not JSON") from None


def _file_member(name: str, size: int) -> tarfile.TarInfo:
    member = tarfile.TarInfo(name)
    member.size = size
    member.mode = 0o644
    return member
