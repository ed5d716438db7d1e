"""The receiver's archive checks on hand-made `docker save` archives: a genuine one passes with its
tags removed; a hostile one, another image or a missing layer is refused; the held prefix of
its layers. The whole path with real engines and agents is tests/cluster/test_peer_images.py."""

from __future__ import annotations

import hashlib
import io
import tarfile

import orjson
import pytest

from faden_agent.transfers.archive import (
    ArchiveVerifier,
    ChunkReader,
    IntegrityError,
    chain_ids,
    held_prefix,
)

LAYER = b"layer bytes " * 100


def image_archive(
    *, tags=None, extra: dict[str, bytes] | None = None, layer: bytes = LAYER, link: str | None = None
) -> tuple[bytes, str]:
    """A one-layer image archive as docker save writes it, and its image id."""
    diff_id = "sha256:" + hashlib.sha256(LAYER).hexdigest()
    config = orjson.dumps({"rootfs": {"type": "layers", "diff_ids": [diff_id]}})
    image = hashlib.sha256(config).hexdigest()
    directory = "a" * 64
    files = {
        f"{directory}/VERSION": b"1.0",
        f"{image}.json": config,
        "manifest.json": orjson.dumps(
            [{"Config": f"{image}.json", "RepoTags": tags, "Layers": [f"{directory}/layer.tar"]}]
        ),
        **(extra or {}),
    }
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w") as archive:
        if link is None:
            files[f"{directory}/layer.tar"] = layer
        else:
            member = tarfile.TarInfo(f"{directory}/layer.tar")
            member.type, member.linkname = tarfile.SYMTYPE, link
            archive.addfile(member)
        for name in sorted(files):
            member = tarfile.TarInfo(name)
            member.size = len(files[name])
            archive.addfile(member, io.BytesIO(files[name]))
    return out.getvalue(), "sha256:" + image


def verify(archive: bytes, image_id: str, reference: str | None = "app:1", held: set[str] | None = None) -> bytes:
    verifier = ArchiveVerifier(image_id, reference, held or set(), 1 << 30)
    return b"".join(verifier.verified(ChunkReader([archive[i : i + 1000] for i in range(0, len(archive), 1000)])))


def test_a_genuine_archive_passes_with_its_tags_removed():
    archive, image = image_archive(tags=["app:1"])
    with tarfile.open(fileobj=io.BytesIO(verify(archive, image))) as out:
        manifest = orjson.loads(out.extractfile("manifest.json").read())
        assert manifest[0]["RepoTags"] is None and out.extractfile("a" * 64 + "/layer.tar").read() == LAYER


@pytest.mark.parametrize(
    "archive_and_why",
    [
        ({"layer": b"x" + LAYER[1:]}, "corrupted"),
        ({"tags": ["busybox:latest"]}, "would tag busybox:latest"),
        ({"extra": {"repositories": orjson.dumps({"busybox": {"latest": "x"}})}}, "would tag busybox:latest"),
        ({"extra": {"../etc/passwd": b"x"}}, "unexpected entry"),
        ({"extra": {"b" * 64 + ".json": b"{}"}}, "a different image"),
        ({"extra": {"c" * 64 + "/layer.tar": b"x"}}, "layers the image does not use"),
        ({"link": "/etc/shadow"}, "links outside"),
    ],
    ids=["corrupted", "tag", "repositories", "traversal", "second config", "extra layer", "symlink"],
)
def test_hostile_archives_are_refused_before_the_manifest(archive_and_why):
    options, why = archive_and_why
    archive, image = image_archive(**options)
    with pytest.raises(IntegrityError, match=why):
        verify(archive, image)


def test_another_image_and_a_missing_layer_are_refused():
    archive, image = image_archive()
    with pytest.raises(IntegrityError, match="a different image"):
        verify(archive, "sha256:" + "d" * 64)
    without_layer = io.BytesIO()
    with tarfile.open(fileobj=io.BytesIO(archive)) as src, tarfile.open(fileobj=without_layer, mode="w") as out:
        for member in src:
            if not member.name.endswith("layer.tar"):
                out.addfile(member, src.extractfile(member))
    with pytest.raises(IntegrityError, match="neither in the archive nor on this machine"):
        verify(without_layer.getvalue(), image)
    # ... unless this machine holds that layer's chain: then the archive may leave it out
    diff_id = "sha256:" + hashlib.sha256(LAYER).hexdigest()
    assert verify(without_layer.getvalue(), image, held=set(chain_ids([diff_id])))


def test_held_prefix_counts_the_longest_held_base():
    layers = ["sha256:" + c * 64 for c in "abc"]
    chains = chain_ids(layers)
    assert held_prefix(layers, set()) == 0
    assert held_prefix(layers, {chains[1]}) == 2
    assert held_prefix(layers, {layers[1]}) == 0  # a diff id alone is not a chain
