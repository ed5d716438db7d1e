"""`docker save` archives re-written with tar features: the two no engine writes that cost a
tar reader its bounds (a GNU sparse member whose data is mostly holes; PAX global headers that
every later member inherits), and the PAX headers Go's archive/tar does write (a real save's
entries each after a PAX header of path, size, times and ids, as for a name or a size ustar
cannot hold)."""

from __future__ import annotations

import hashlib
import io
import tarfile

import orjson

MiB = 1 << 20


def entries(archive: bytes) -> list[tuple[tarfile.TarInfo, bytes | None]]:
    with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
        return [(m, tar.extractfile(m).read() if m.isfile() else None) for m in tar]  # type: ignore[union-attr]


def rewrite(archive: bytes, edit, **open_options) -> bytes:
    """The archive's entries again, each through `edit(member, content) -> bytes` (its bytes)."""
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w", **open_options) as tar:
        for member, content in entries(archive):
            written = edit(member, content)
            if written is None:
                tar.addfile(member, io.BytesIO(content) if content is not None else None)
            else:
                tar.fileobj.write(written)  # type: ignore[union-attr]
                tar.offset += len(written)
    return out.getvalue()


def gnu_sparse(name: str, real_size: int, fragments: list[tuple[int, bytes]]) -> bytes:
    """A GNU sparse member (type S, old GNU format): `real_size` bytes of which only the
    fragments (offset, data) are on the wire, the rest holes; up to 4 fragments in the header."""
    assert len(fragments) <= 4
    member = tarfile.TarInfo(name)
    member.type = tarfile.GNUTYPE_SPARSE
    data = b"".join(piece for _, piece in fragments)
    member.size = len(data)
    block = bytearray(member.tobuf(tarfile.GNU_FORMAT))
    for i, (offset, piece) in enumerate(fragments):  # struct sparse {offset[12]; numbytes[12]} x 4 at 386
        block[386 + 24 * i : 398 + 24 * i] = b"%011o\0" % offset
        block[398 + 24 * i : 410 + 24 * i] = b"%011o\0" % len(piece)
    block[482] = 0  # no extension headers
    block[483:495] = b"%011o\0" % real_size
    block[148:156] = b" " * 8
    block[148:156] = b"%06o\0 " % sum(block[:512])
    return bytes(block[:512]) + data + bytes(-len(data) % 512)


def with_sparse_layers(archive: bytes, real_size: int = 256 * MiB) -> bytes:
    """Each layer file (20.10's `<dir>/layer.tar`) made a sparse member of `real_size` bytes:
    its real content at the start, then holes (what tarfile hands on as zeros)."""

    def edit(member: tarfile.TarInfo, content: bytes | None) -> bytes | None:
        if member.name.endswith("/layer.tar") and content is not None:
            return gnu_sparse(member.name, real_size, [(0, content)])
        return None

    return rewrite(archive, edit)


def with_global_header(archive: bytes, record_bytes: int = 60_000) -> bytes:
    """A PAX global header first: a reader that keeps it gives it to every later member."""
    return rewrite(archive, lambda m, c: None, format=tarfile.PAX_FORMAT, pax_headers={"comment": "x" * record_bytes})


def with_go_pax_headers(archive: bytes, uname: str = "root") -> bytes:
    """Every entry after a PAX header of the records Go's archive/tar writes (path, size,
    mtime, uid, gid, uname, gname): accepted, and none of it passed on."""

    def edit(member: tarfile.TarInfo, content: bytes | None) -> bytes | None:
        member.pax_headers = {
            "path": member.name,
            "mtime": str(member.mtime),
            "uid": "0",
            "gid": "0",
            "uname": uname,
            "gname": "root",
            **({"size": str(member.size)} if member.isfile() else {}),
        }
        return None

    return rewrite(archive, edit, format=tarfile.PAX_FORMAT)


def sparse_image(real_size: int = 256 * MiB) -> tuple[str, bytes]:
    """(id, archive) of a 20.10-shaped save whose one layer is a sparse member: a small tar
    then holes up to `real_size` (zeros end a tar, so the layer is valid), its diff id that of
    all `real_size` bytes. A reader that expands holes hands `docker load` the whole layer
    from an archive of a few KiB."""
    layer = io.BytesIO()
    with tarfile.open(fileobj=layer, mode="w", format=tarfile.USTAR_FORMAT) as tar:
        member = tarfile.TarInfo("marker")
        member.size = 6
        tar.addfile(member, io.BytesIO(b"sparse"))
    head = layer.getvalue()
    digest = hashlib.sha256(head)
    zeros = bytes(MiB)
    left = real_size - len(head)
    while left > 0:
        digest.update(zeros[: min(left, MiB)])
        left -= min(left, MiB)
    config = orjson.dumps(
        {
            "architecture": "amd64",
            "os": "linux",
            "config": {"Cmd": ["/marker"]},
            "rootfs": {"type": "layers", "diff_ids": ["sha256:" + digest.hexdigest()]},
        }  # fmt: skip
    )
    image_hex = hashlib.sha256(config).hexdigest()
    folder = "e" * 64
    manifest = orjson.dumps([{"Config": f"{image_hex}.json", "RepoTags": None, "Layers": [f"{folder}/layer.tar"]}])
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w", format=tarfile.USTAR_FORMAT) as tar:
        directory = tarfile.TarInfo(folder)
        directory.type = tarfile.DIRTYPE
        tar.addfile(directory)
        tar.fileobj.write(gnu_sparse(f"{folder}/layer.tar", real_size, [(0, head)]))  # type: ignore[union-attr]
        tar.offset += 512 + len(head) + (-len(head) % 512)
        for name, content in ((f"{image_hex}.json", config), ("manifest.json", manifest)):
            member = tarfile.TarInfo(name)
            member.size = len(content)
            tar.addfile(member, io.BytesIO(content))
    return "sha256:" + image_hex, out.getvalue()
