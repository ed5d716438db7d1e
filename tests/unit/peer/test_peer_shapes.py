"""The receiver's check of every `docker save` shape: 20.10's, the OCI layout of
Engines 25-28 with the classic store, and the containerd store's (gzip'd layers; index.json
to a manifest or to a nested index). Each shape passes whole, passes without the layers the
receiver holds, names no image, and meets the same bounds (entries, headers, bytes,
metadata); the archives are made by tests/support/imageshapes.py, the real engines' own in
tests/integration/peer/test_peer_shapes.py."""

from __future__ import annotations

import gzip
import io
import os
import tarfile

import orjson
import pytest

from faden_agent.transfers.archive import (
    INFLATE_FACTOR,
    MAX_ENTRIES,
    META_LIMIT,
    ArchiveVerifier,
    ChunkReader,
    IntegrityError,
    chain_ids,
    strip_held_layers,
)
from faden_agent.transfers.oci import ZSTD_MAGIC
from faden_agent.transfers.server import held_layer_files
from faden_agent.transfers.tarstream import PAX_LIMIT
from tests.support.imageshapes import (
    classic_layout,
    containerd_layout,
    digest_of,
    read_v1,
    stacked_v1,
    synthetic_v1,
    write_tar,
)

LAYERS = [write_tar([("base", os.urandom(64 << 10))]), write_tar([("top", b"top layer")])]
DIFF_IDS = [digest_of(layer) for layer in LAYERS]
V1 = synthetic_v1(LAYERS)
CONFIG_ID = digest_of(read_v1(V1)[0])


def shape(name: str) -> tuple[bytes, str]:
    """(archive, the id the receiver asks for) of one shape of the same image."""
    if name == "20.10":
        return V1, CONFIG_ID
    if name == "classic 25-28":
        return classic_layout(V1), CONFIG_ID
    if name == "classic 25-28 tagged":
        return classic_layout(V1, tags=["app:1"]), CONFIG_ID
    return containerd_layout(V1, nested=name == "containerd nested index")


SHAPES = ["20.10", "classic 25-28", "containerd", "containerd nested index"]


def verify(archive: bytes, image_id: str, held: set[str] | None = None, limit: int = 1 << 30, **kw) -> tuple:
    verifier = ArchiveVerifier(image_id, "app:1", held or set(), limit, **kw)
    pieces = [archive[i : i + 4096] for i in range(0, len(archive), 4096)]
    return b"".join(verifier.verified(ChunkReader(pieces))), verifier


def members(archive: bytes) -> dict[str, bytes | None]:
    with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
        return {m.name: tar.extractfile(m).read() if m.isfile() else None for m in tar}  # type: ignore[union-attr]


def retar(archive: bytes, drop=(), replace: dict[str, bytes] | None = None, before=(), after=()) -> bytes:
    """The archive's entries again: some dropped or replaced, entries added before or after."""
    out = io.BytesIO()
    with tarfile.open(fileobj=io.BytesIO(archive)) as src, tarfile.open(fileobj=out, mode="w") as tar:
        for member, content in before:
            tar.addfile(member, io.BytesIO(content) if content is not None else None)
        for member in src:
            if member.name in drop:
                continue
            content = (replace or {}).get(member.name)
            if content is not None:
                member.size = len(content)
                tar.addfile(member, io.BytesIO(content))
            else:
                tar.addfile(member, src.extractfile(member) if member.isfile() else None)
        for member, content in after:
            tar.addfile(member, io.BytesIO(content))
    return out.getvalue()


def file_entry(name: str, content: bytes) -> tuple[tarfile.TarInfo, bytes]:
    member = tarfile.TarInfo(name)
    member.size = len(content)
    return member, content


def base_layer_file(archive: bytes) -> str:
    return orjson.loads(members(archive)["manifest.json"])[0]["Layers"][0]


@pytest.mark.parametrize("name", [*SHAPES, "classic 25-28 tagged"])
def test_every_shape_passes_whole_and_names_nothing(name):
    archive, image_id = shape(name)
    out, verifier = verify(archive, image_id)
    files = members(out)
    manifest = orjson.loads(files["manifest.json"])
    index = orjson.loads(files["index.json"])
    assert manifest[0]["RepoTags"] is None and len(manifest[0]["Layers"]) == 2
    assert [set(entry) for entry in index["manifests"]] == [{"mediaType", "digest", "size"}]  # no name annotations
    assert "repositories" not in files and orjson.loads(files["oci-layout"]) == {"imageLayoutVersion": "1.0.0"}
    assert verifier.diff_ids == DIFF_IDS and verifier.layers_received == 2
    assert image_id in verifier.engine_ids and CONFIG_ID in verifier.engine_ids
    target = index["manifests"][0]["digest"]
    assert (
        target in verifier.engine_ids and digest_of(files["blobs/sha256/" + target.removeprefix("sha256:")]) == target
    )


@pytest.mark.parametrize("name", SHAPES)
def test_a_layer_the_receiver_holds_may_be_left_out_of_every_shape(name):
    archive, image_id = shape(name)
    without_base = retar(archive, drop={base_layer_file(archive)})
    with pytest.raises(IntegrityError, match="neither in the archive nor on this machine"):
        verify(without_base, image_id)
    _, verifier = verify(without_base, image_id, held={chain_ids(DIFF_IDS)[0]})
    assert verifier.layers_received == 1


def test_the_holder_names_the_held_layer_files_of_20_10_and_the_classic_store():
    """20.10 names a layer's folder by its v1 id, the classic store of 25+ its blob by the
    diff id; a layer file that a later (not held) layer uses too is kept."""
    names = held_layer_files(None, CONFIG_ID, DIFF_IDS, 1, containerd_store=False)  # type: ignore[arg-type]
    assert "blobs/sha256/" + DIFF_IDS[0].removeprefix("sha256:") in names and len(names) == 2
    same_twice = [DIFF_IDS[0], DIFF_IDS[0]]
    assert not held_layer_files(None, CONFIG_ID, same_twice, 1, containerd_store=False)  # type: ignore[arg-type]
    archive = classic_layout(V1)
    stripped = b"".join(strip_held_layers(ChunkReader([archive]), names))
    assert base_layer_file(archive) not in members(stripped)
    _, verifier = verify(stripped, CONFIG_ID, held={chain_ids(DIFF_IDS)[0]})
    assert verifier.layers_received == 1


def many_entries(archive: bytes) -> bytes:
    dirs = []
    for n in range(MAX_ENTRIES + 1):
        member = tarfile.TarInfo(f"{n:064x}")
        member.type = tarfile.DIRTYPE
        dirs.append((member, None))
    return retar(archive, before=dirs)


BOUNDS = {
    "entries": (many_entries, {}, f"more than {MAX_ENTRIES} entries"),
    "bytes": (lambda a: a, {"limit": 32 << 10}, "larger than the 32768 bytes"),
    "metadata": (
        lambda a: retar(a, replace={"manifest.json": members(a)["manifest.json"] + b" " * META_LIMIT}),
        {},
        "metadata is at most",
    ),
}


@pytest.mark.parametrize("bound", sorted(BOUNDS))
@pytest.mark.parametrize("name", SHAPES)
def test_the_bounds_hold_for_every_shape(name, bound):
    archive, image_id = shape(name)
    change, options, why = BOUNDS[bound]
    with pytest.raises(IntegrityError, match=why):
        verify(change(archive), image_id, **options)


@pytest.mark.parametrize("name", SHAPES)
def test_an_extended_header_over_the_bound_is_refused_in_every_shape(name):
    archive, image_id = shape(name)
    member = tarfile.TarInfo("blobs")
    member.type = tarfile.DIRTYPE
    member.pax_headers = {"path": "x" * (PAX_LIMIT + 1)}
    with pytest.raises(IntegrityError, match="a PAX header of .* bytes"):
        verify(retar(archive, before=[(member, None)]), image_id)


@pytest.mark.parametrize("name", ["containerd", "containerd nested index"])
def test_a_gzip_bomb_is_cut_at_the_unpacked_bound(name):
    archive, image_id = shape(name)
    bomb = gzip.compress(bytes(64 << 20), compresslevel=9)
    limit = len(archive) + len(bomb) + (64 << 10)
    with pytest.raises(IntegrityError, match="the layers unpack to more than"):
        verify(retar(archive, after=[file_entry("blobs/sha256/" + digest_of(bomb)[7:], bomb)]), image_id, limit=limit)
    assert 64 << 20 > limit * INFLATE_FACTOR  # the bound, not the end of the bomb, cut it


def lying_layers() -> tuple[bytes, str]:
    """A containerd-store archive whose top layer blob is intact (it hashes to its name, as
    the manifest says) but unpacks to another layer than the config's diff id."""
    config, _, _ = read_v1(V1)
    other = write_tar([("top", b"something else")])
    v1, _ = stacked_v1(config, [LAYERS[0], other], diff_ids=DIFF_IDS)
    return containerd_layout(v1, nested=False)


@pytest.mark.parametrize(
    ("case", "why"),
    [
        ("corrupt blob", "hashes to"),
        ("lying layer", "unpacks to sha256:.*, the image says .*: corrupted"),
        ("zstd layer", "zstd-compressed: not checked here"),
        ("unused blob", "blobs the image does not use"),
        ("tag in index.json", "would tag docker.io/busybox:latest|would tag busybox:latest"),
        ("other platform", "no manifest for linux/arm64"),
        ("another image", "holds no blob of the image"),
        ("not gzip", "not valid gzip"),
    ],
)
def test_hostile_oci_layouts_are_refused(case, why):
    archive, image_id = shape("containerd nested index")
    options = {}
    if case == "corrupt blob":  # an uncompressed one: a gzip'd one fails its CRC first
        archive, image_id = shape("classic 25-28")
        victim = base_layer_file(archive)
        content = members(archive)[victim]
        archive = retar(archive, replace={victim: content[:-1] + bytes([content[-1] ^ 1])})
    elif case == "lying layer":
        archive, image_id = lying_layers()
    elif case == "zstd layer":
        archive, image_id = containerd_layout(V1, nested=False, compress=lambda data: ZSTD_MAGIC + data)
    elif case == "unused blob":
        big = os.urandom(META_LIMIT + 1)
        archive = retar(archive, after=[file_entry("blobs/sha256/" + digest_of(big)[7:], big)])
    elif case == "tag in index.json":
        archive, image_id = containerd_layout(V1, name="busybox:latest")
    elif case == "other platform":
        options = {"platform": ("linux", "arm64")}
    elif case == "another image":
        image_id = "sha256:" + "cd" * 32
    elif case == "not gzip":
        archive, image_id = containerd_layout(V1, nested=False, compress=lambda data: b"\x1f\x8b" + data)
    with pytest.raises(IntegrityError, match=why):
        verify(archive, image_id, **options)


def test_the_classic_layout_must_point_manifest_json_at_the_config_asked_for():
    archive, image_id = shape("classic 25-28")
    entry = orjson.loads(members(archive)["manifest.json"])
    entry[0]["Config"] = "blobs/sha256/" + "ef" * 32
    with pytest.raises(IntegrityError, match="manifest.json names config"):
        verify(retar(archive, replace={"manifest.json": orjson.dumps(entry)}), image_id)


def test_many_small_layers_leave_room_for_the_metadata():
    """Blobs are sorted by digest, so the config may come last: layers under the metadata
    bound (a tar, a gzip) are never kept, however many there are (6 x 3 MiB here, over the
    16 MiB that metadata may keep)."""
    v1 = synthetic_v1([write_tar([(f"l{i}", os.urandom(3 << 20))]) for i in range(6)])
    _, verifier = verify(classic_layout(v1), digest_of(read_v1(v1)[0]))
    assert verifier.layers_received == 6 and verifier.kept < 1 << 20
