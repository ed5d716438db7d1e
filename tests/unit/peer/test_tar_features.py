"""The receiver reads only the tar an engine's save writes (transfers/tarstream.py): a GNU sparse
member and a PAX global header (what blew a 5.6 KB archive up to a 256 MiB layer, and 0.31 MiB
up to 31.5 MiB, under tarfile) are refused at their header; the PAX headers Go writes pass;
and what is passed on is written afresh, never the peer's header bytes."""

from __future__ import annotations

import io
import tarfile
import time

import pytest

from faden_agent.transfers.archive import ArchiveVerifier, ChunkReader, IntegrityError
from faden_agent.transfers.tarstream import Member, TarRefused, header, members
from tests.support.imageshapes import classic_layout, containerd_layout, digest_of, read_v1, synthetic_v1, write_tar
from tests.support.tarfeatures import (
    MiB,
    entries,
    gnu_sparse,
    with_global_header,
    with_go_pax_headers,
    with_sparse_layers,
)

LAYERS = [write_tar([("base", bytes(64 << 10))]), write_tar([("top", b"top layer")])]
V1 = synthetic_v1(LAYERS)
CONFIG_ID = digest_of(read_v1(V1)[0])


def shapes() -> dict[str, tuple[bytes, str]]:
    return {
        "20.10": (V1, CONFIG_ID),
        "classic 25-28": (classic_layout(V1), CONFIG_ID),
        "containerd": containerd_layout(V1, nested=False),
    }


def verify(archive: bytes, image_id: str, limit: int = 1 << 30) -> bytes:
    verifier = ArchiveVerifier(image_id, None, set(), limit)
    return b"".join(verifier.verified(ChunkReader([archive[i : i + 4096] for i in range(0, len(archive), 4096)])))


def test_a_sparse_layer_is_refused_at_its_header():
    """Under tarfile the 20.10 save whose layer files are sparse members hands on 256 MiB
    per layer from a few KiB; here it ends at the first one, having passed on nothing of it."""
    archive = with_sparse_layers(V1)
    assert max(m.size for m, _ in entries(archive)) == 256 * MiB  # what tarfile made of it
    verifier = ArchiveVerifier(CONFIG_ID, None, set(), 1 * MiB)
    passed = bytearray()
    started = time.process_time()
    with pytest.raises(IntegrityError, match=r"/layer.tar is a tar entry of type b'S': no docker save writes one"):
        for piece in verifier.verified(ChunkReader([archive])):
            passed += piece
    assert time.process_time() - started < 1.0
    assert verifier.received <= len(archive) and b"layer.tar" not in passed


def test_pax_global_headers_are_refused_at_the_first():
    archive = with_global_header(V1, record_bytes=60_000)
    assert all(len(m.pax_headers.get("comment", "")) == 60_000 for m, _ in entries(archive))  # tarfile: each inherits
    with pytest.raises(IntegrityError, match=r"is a tar entry of type b'g'"):
        verify(archive, CONFIG_ID)


def pax_member(name: str, records: dict[str, str], content: bytes = b"") -> bytes:
    member = tarfile.TarInfo(name)
    member.size = len(content)
    member.pax_headers = records
    return member.tobuf(tarfile.PAX_FORMAT) + content + bytes(-len(content) % 512)


def raw_member(name: str, kind: bytes, tar_format: int = tarfile.USTAR_FORMAT, linkname: str = "") -> bytes:
    member = tarfile.TarInfo(name)
    member.type, member.linkname = kind, linkname
    return member.tobuf(tar_format)


END = bytes(1024)


@pytest.mark.parametrize(
    ("archive", "why"),
    [
        (gnu_sparse("f", 1 << 40, [(0, b"x"), (1 << 39, b"y")]) + END, "type b'S'"),
        (raw_member("././@LongLink", tarfile.GNUTYPE_LONGNAME, tarfile.GNU_FORMAT) + END, "type b'L'"),
        (raw_member("a", tarfile.LNKTYPE, linkname="b") + END, "type b'1'"),
        (raw_member("dev", tarfile.CHRTYPE) + END, "type b'3'"),
        (raw_member("fifo", tarfile.FIFOTYPE) + END, "type b'6'"),
        (raw_member("a", tarfile.CONTTYPE) + END, "type b'7'"),
        (raw_member("a", tarfile.AREGTYPE) + END, "type b'\\\\x00'"),
        (
            pax_member("f", {"GNU.sparse.map": "0,1,99999999,1", "GNU.sparse.size": "1000000000"}, b"xy") + END,
            "a PAX record 'GNU.sparse",
        ),  # fmt: skip
        (pax_member("f", {"hdrcharset": "BINARY"}) + END, "a PAX record 'hdrcharset'"),
        (pax_member("f", {"size": "12x"}) + END, "size='12x' is not well formed"),
        (pax_member("f", {"path": "a"})[:1024] + pax_member("f", {"path": "a"}), "two PAX headers in a row"),
        (pax_member("f", {"path": "a"})[:1024] + END, "a PAX header with no entry after it"),
        (bytes(raw_member("f", tarfile.REGTYPE, tarfile.GNU_FORMAT)) + END, "not POSIX ustar"),
        (raw_member("f", tarfile.REGTYPE)[:100] + b"!" + raw_member("f", tarfile.REGTYPE)[101:] + END, "checksum"),
        (
            raw_member("d", tarfile.DIRTYPE)[:124] + b"00000000010\0" + raw_member("d", tarfile.DIRTYPE)[136:] + END,
            "checksum",
        ),  # fmt: skip
        (raw_member("f", tarfile.REGTYPE)[:300], "ends inside a header"),
        (raw_member("f", tarfile.REGTYPE), "ends inside a header"),  # no end-of-archive block
    ],
)
def test_each_feature_no_save_writes_is_refused_with_its_name(archive, why):
    with pytest.raises(TarRefused, match=why.replace("(", r"\(")):
        for _ in members(ChunkReader([archive])):
            pass


@pytest.mark.parametrize("name", ["20.10", "classic 25-28", "containerd"])
def test_the_pax_headers_go_writes_pass_and_none_of_them_is_passed_on(name):
    """Each entry after a PAX header of path, size, times, ids and a 30 KB user name: the
    image verifies, and what goes to the engine carries no PAX header (ustar holds it all)."""
    archive, image_id = shapes()[name]
    with_pax = with_go_pax_headers(archive, uname="u" * 30_000)
    out = verify(with_pax, image_id)
    assert out == verify(archive, image_id)  # the same archive, byte for byte
    assert len(with_pax) > len(archive) + 30_000 * len(entries(archive))  # what a copied header would carry
    assert all(not m.pax_headers for m, _ in entries(out))


def test_a_long_name_comes_through_a_pax_header_and_goes_on_in_a_fresh_one():
    name = "blobs/sha256/" + "d" * 200
    read = list(members(ChunkReader([pax_member(name, {"path": name, "uname": "x" * 100}, b"data") + END])))
    assert [(m.name, m.size, data is not None) for m, data in read] == [(name, 4, True)]
    written = header(read[0][0])
    with tarfile.open(fileobj=io.BytesIO(written + b"data" + bytes(508) + END)) as tar:
        (member,) = tar.getmembers()
        assert (member.name, member.uname, member.pax_headers) == (name, "", {"path": name})


def test_a_member_left_unread_is_skipped_and_read_ones_end_at_their_size():
    files = [("a", b"first" * 300), ("b", b"second")]
    read = []
    for member, data in members(ChunkReader([write_tar(files)])):
        read.append((member.name, data.read(4) if member.name == "b" else None))  # a: not read at all
    assert read == [("a", None), ("b", b"seco")]
    assert header(Member("x", "dir")).startswith(b"x/")  # a directory's name ends in a slash


def test_a_large_real_looking_archive_costs_linear_time():
    """Thousands of Go-style PAX headers: the time per entry does not grow with their number."""

    def archive(count: int) -> bytes:
        body = b"".join(
            pax_member(f"{n:064x}.json", {"path": f"{n:064x}.json", "mtime": "1.5"}, b"{}") for n in range(count)
        )
        return body + END

    times = []
    for count in (1000, 8000):
        data = archive(count)
        started = time.process_time()
        assert sum(1 for _ in members(ChunkReader([data]))) == count
        times.append((time.process_time() - started) / count)
    print(f"per entry: {times[0] * 1e6:.1f} us at 1,000, {times[1] * 1e6:.1f} us at 8,000")
    assert times[1] < times[0] * 3  # linear (a quadratic reader: 8x per entry)
