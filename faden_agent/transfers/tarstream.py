"""The tar of `docker save`, read and written strictly: POSIX ustar headers of the types an
engine's save holds (file, directory, symlink), each after at most one PAX header of the keys
Go's archive/tar writes; anything else (sparse members, global headers, GNU long names, links,
devices) is TarRefused. Linear in the bytes read; a header passed on is written afresh from
its parsed fields, never copied."""

from __future__ import annotations

import io
import re
import tarfile
from collections.abc import Iterator
from dataclasses import dataclass

BLOCK = 512
CHUNK = 1 << 20  # read ahead
MAGIC = b"ustar\x0000"  # POSIX ustar: what every engine's save writes (20.10, 29.1.5)
KINDS = {b"0": "file", b"5": "dir", b"2": "symlink"}
PAX = b"x"
PAX_LIMIT = 64 << 10  # a PAX header's data, read into memory
# What Go's archive/tar writes into a PAX header (a long or non-ASCII name, a size of 8 GiB or
# more, times and ids out of ustar's range); GNU.sparse.*, hdrcharset, comment: refused.
PAX_KEYS = frozenset({"path", "linkpath", "size", "mtime", "atime", "ctime", "uid", "gid", "uname", "gname"})
_NUMBER = re.compile(r"\d{1,20}")
_TIME = re.compile(r"-?\d{1,19}(\.\d{1,9})?")
_OCTAL = re.compile(rb"[0-7]{1,12}")
_TAR_TYPES = {"file": tarfile.REGTYPE, "dir": tarfile.DIRTYPE, "symlink": tarfile.SYMTYPE}
MAX_MTIME = 8**11 - 1  # ustar's field: a later time would need a PAX header of our own


class TarRefused(ValueError):
    """A tar stream that is not what `docker save` writes (or is cut short)."""


@dataclass(frozen=True)
class Member:
    name: str
    kind: str  # file, dir or symlink
    size: int = 0  # of the data: 0 unless a file
    mode: int = 0o644
    mtime: int = 0
    linkname: str = ""

    def isfile(self) -> bool:
        return self.kind == "file"

    def isdir(self) -> bool:
        return self.kind == "dir"

    def issym(self) -> bool:
        return self.kind == "symlink"


class Data:
    """A member's data: read() returns at most what is left of it."""

    def __init__(self, stream: io.BufferedIOBase, size: int):
        self.stream = stream
        self.left = size

    def read(self, size: int = -1) -> bytes:
        size = self.left if size < 0 else min(size, self.left)
        data = self.stream.read(size) if size > 0 else b""
        self.left -= len(data)
        return data


def members(source: io.RawIOBase) -> Iterator[tuple[Member, Data]]:
    """Each (member, its data: none but a file's), in order, until the end-of-archive block;
    what a caller leaves unread of a member's data is skipped when it asks for the next."""
    stream: io.BufferedIOBase = io.BufferedReader(source, CHUNK)
    pax: dict[str, str] | None = None
    while True:
        block = _exactly(stream, BLOCK, "a header")
        if block == bytes(BLOCK):
            if pax is not None:
                raise TarRefused("a PAX header with no entry after it")
            return
        kind, name, size, mode, mtime, linkname = _ustar(block)
        if kind == PAX:
            if pax is not None:
                raise TarRefused(f"two PAX headers in a row (at {name[:200]})")
            if size > PAX_LIMIT:
                raise TarRefused(f"a PAX header of {size} bytes (at most {PAX_LIMIT})")
            pax = _pax_records(_exactly(stream, size + _pad(size), "a PAX header")[:size])
            continue
        if pax is not None:
            name, linkname = pax.get("path", name), pax.get("linkpath", linkname)
            size = int(pax.get("size", size))
            mtime = int(float(pax.get("mtime", mtime)))
            pax = None
        member = Member(name, KINDS[kind], size, mode & 0o7777, mtime, linkname)
        if not member.isfile() and size:
            raise TarRefused(f"{name[:200]}: a {member.kind} with {size} bytes of data")
        data = Data(stream, size)
        yield member, data
        _skip(stream, data.left + _pad(size), name)


def header(member: Member) -> bytes:
    """The member's header, made from its fields alone (a PAX header only where ustar has no
    room: a long name, a size of 8 GiB or more)."""
    info = tarfile.TarInfo(member.name)
    info.type = _TAR_TYPES[member.kind]
    info.size = member.size if member.isfile() else 0
    info.mode = member.mode
    info.mtime = min(max(member.mtime, 0), MAX_MTIME)
    info.linkname = member.linkname
    return info.tobuf(tarfile.PAX_FORMAT)


def padding(size: int) -> bytes:
    return bytes(_pad(size))


def _pad(size: int) -> int:
    return -size % BLOCK


def _exactly(stream: io.BufferedIOBase, size: int, what: str) -> bytes:
    data = stream.read(size)
    if len(data) != size:
        raise TarRefused(f"the archive ends inside {what} (cut short)")
    return data


def _skip(stream: io.BufferedIOBase, size: int, name: str) -> None:
    while size > 0:
        data = stream.read(min(size, CHUNK))
        if not data:
            raise TarRefused(f"the archive ends inside {name[:200]} (cut short)")
        size -= len(data)


def _ustar(block: bytes) -> tuple[bytes, str, int, int, int, str]:
    """(type flag, name, size, mode, mtime, link name) of a POSIX ustar header."""
    stored = _octal(block[148:156], "checksum")
    if stored != sum(block[:148]) + 8 * 32 + sum(block[156:]):
        raise TarRefused("a tar header whose checksum does not match")
    name, prefix = _text(block[0:100], "name"), _text(block[345:500], "prefix")
    kind = block[156:157]
    if kind not in KINDS and kind != PAX:
        raise TarRefused(f"{name[:200]} is a tar entry of type {kind!r}: no docker save writes one")
    if block[257:265] != MAGIC:
        raise TarRefused(f"a tar header that is not POSIX ustar (magic {block[257:265]!r})")
    if prefix:
        name = f"{prefix}/{name}"
    size = _octal(block[124:136], "size")
    return (
        kind,
        name,
        size,
        _octal(block[100:108], "mode"),
        _octal(block[136:148], "mtime"),
        _text(block[157:257], "link name"),
    )


def _octal(field: bytes, what: str) -> int:
    digits = field.strip(b"\0 ")
    if not digits:
        return 0
    if not _OCTAL.fullmatch(digits):
        raise TarRefused(f"a tar header's {what} is not an octal number ({field[:12]!r})")
    return int(digits, 8)


def _text(field: bytes, what: str) -> str:
    try:
        return field.split(b"\0", 1)[0].decode("utf-8")
    except UnicodeDecodeError:
        raise TarRefused(f"a tar header's {what} is not UTF-8") from None


def _pax_records(data: bytes) -> dict[str, str]:
    """The `length key=value\\n` records of a PAX header, each key at most once, each known."""
    records: dict[str, str] = {}
    pos = 0
    while pos < len(data):
        space = data.find(b" ", pos, pos + 21)
        digits = data[pos:space] if space > pos else b""
        if not digits.isdigit():
            raise TarRefused("a PAX record without its length")
        end = pos + int(digits)
        if end > len(data) or end <= space + 2 or data[end - 1 : end] != b"\n":
            raise TarRefused("a PAX record whose length does not fit it")
        key_bytes, eq, value_bytes = data[space + 1 : end - 1].partition(b"=")
        try:
            key, value = key_bytes.decode("ascii"), value_bytes.decode("utf-8")
        except UnicodeDecodeError:
            raise TarRefused("a PAX record that is not UTF-8") from None
        if not eq or key not in PAX_KEYS:
            raise TarRefused(f"a PAX record {key[:40]!r}: no docker save writes one")
        if key in records:
            raise TarRefused(f"a PAX header that names {key} twice")
        _check_pax(key, value)
        records[key] = value
        pos = end
    return records


def _check_pax(key: str, value: str) -> None:
    if key in ("size", "uid", "gid"):
        good = bool(_NUMBER.fullmatch(value))
    elif key in ("mtime", "atime", "ctime"):
        good = bool(_TIME.fullmatch(value))
    elif key in ("path", "linkpath"):
        good = bool(value) and "\0" not in value
    else:
        good = "\0" not in value
    if not good:
        raise TarRefused(f"a PAX record {key}={value[:40]!r} is not well formed")
