"""Parts of images-from-peers (issue 14) that need no second engine: tickets, the archive
checks on hand-made archives, the disk-space check on a real small tmpfs. The whole path
with real engines and agents is tests/cluster/test_peer_images.py."""

from __future__ import annotations

import hashlib
import io
import os
import subprocess
import tarfile
import threading
import time

import orjson
import pytest

from faden_agent import protocol
from faden_agent.transfers.archive import (
    ArchiveVerifier,
    ChunkReader,
    IntegrityError,
    chain_ids,
    held_prefix,
)
from faden_agent.transfers.fetch import NoSpace, PeerFailure, check_space
from faden_agent.transfers.tickets import EXPIRED_KEPT_S, SPENT_SUFFIX, Ticket, TicketBox, TicketRefused, ticket_hash

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


def test_a_ticket_is_spent_by_exactly_one_of_many_concurrent_uses(tmp_path):
    box = TicketBox(tmp_path)
    box.add(ticket_hash("t" * 32), Ticket("sha256:" + "a" * 64, "198.18.0.12", time.time() + 60))
    assert "t" * 32 not in "".join(p.read_text() + p.name for p in box.path.iterdir())  # only its hash is kept
    wins, refusals = [], []

    def use() -> None:
        try:
            wins.append(box.take("t" * 32, "sha256:" + "a" * 64, "198.18.0.12"))
        except TicketRefused as refused:
            refusals.append(refused.reason)

    threads = [threading.Thread(target=use) for _ in range(20)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(wins) == 1 and refusals == ["ticket_refused"] * 19
    assert not list(box.path.iterdir())


def test_expired_tickets_are_refused_and_forgotten(tmp_path):
    box = TicketBox(tmp_path)
    box.add(ticket_hash("e" * 32), Ticket("sha256:" + "a" * 64, None, time.time() - 1))
    with pytest.raises(TicketRefused) as refused:
        box.take("e" * 32, "sha256:" + "a" * 64, "198.18.0.12")
    assert refused.value.reason == "ticket_expired"
    box.add(ticket_hash("f" * 32), Ticket("sha256:" + "a" * 64, None, time.time() - 1))
    assert box.expire() == 0  # just expired: kept, so a late receiver hears `ticket_expired`
    assert box.expire(kept_s=0) == 1 and not list(box.path.iterdir())


@pytest.mark.parametrize(
    "content",
    [
        b"",
        b'{"image_id": "sha256:',
        b"[1, 2]",
        b'{"image_id": 7, "receiver": null, "expires_at": 1e12}',
        b'{"image_id": "x", "receiver": null, "expires_at": "never"}',
        b'{"image_id": "x", "extra": 1}',
        b"\xff" * 300,
    ],
)
def test_a_corrupt_ticket_file_is_a_refusal_in_one_line_and_spent(tmp_path, content):
    """Before: a cut or garbled file raised JSONDecodeError/TypeError out of take (the peer
    server's handler thread ended without an answer to the receiver)."""
    box = TicketBox(tmp_path)
    box.add(ticket_hash("c" * 32), Ticket("sha256:" + "a" * 64, None, time.time() + 60))
    (box.path / ticket_hash("c" * 32)).write_bytes(content)
    with pytest.raises(TicketRefused) as refused:
        box.take("c" * 32, "sha256:" + "a" * 64, "198.18.0.12")
    assert refused.value.reason == "ticket_refused" and "corrupt" in refused.value.message
    assert "\n" not in refused.value.message and len(refused.value.message) <= 200
    assert not list(box.path.iterdir())  # spent: a second try is 'unknown'


def test_expire_removes_old_corrupt_tickets_and_partial_writes(tmp_path):
    """Before: expire skipped a file it could not read as a ticket, and never looked at a
    partial `.new` write a crash left: both stayed in the runtime directory for good."""
    box = TicketBox(tmp_path)
    box.add(ticket_hash("g" * 32), Ticket("sha256:" + "a" * 64, None, time.time() + 3600))
    live = box.path / ticket_hash("g" * 32)
    corrupt = box.path / ticket_hash("h" * 32)
    partial = box.path / f".{ticket_hash('i' * 32)}.new"
    corrupt.write_bytes(b'{"image_id": "sha256:')
    partial.write_bytes(b'{"image_id"')
    assert box.expire() == 0  # young: kept like an expired ticket would be
    old = time.time() - EXPIRED_KEPT_S - 5
    for path in (live, corrupt, partial):
        os.utime(path, (old, old))
    assert box.expire() == 2
    assert list(box.path.iterdir()) == [live]  # a valid ticket goes by its grant, not its age
    # A spent ticket a worker died before removing: it counts from its spending (the rename).
    spent = live.with_name(live.name + SPENT_SUFFIX)
    live.rename(spent)
    assert box.expire() == 0 and spent.exists()
    assert box.expire(kept_s=-60) == 1 and not list(box.path.iterdir())


class EngineInfo:
    def __init__(self, root: str):
        self.root = root

    def info(self) -> dict:
        return {"DockerRootDir": self.root}


def test_no_space_names_the_bytes_needed_and_free(tmp_path):
    mount = tmp_path / "small"
    mount.mkdir()
    if subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=64m", "tmpfs", str(mount)], capture_output=True, check=False
    ).returncode:
        pytest.skip("needs root to mount a tmpfs")
    try:
        with pytest.raises(NoSpace, match=r"needs about \d+ bytes on .*small, \d+ are free"):
            check_space(EngineInfo(str(mount)), 100 << 20)
        check_space(EngineInfo(str(tmp_path)), 1 << 20)  # room enough elsewhere: no refusal
    finally:
        subprocess.run(["umount", str(mount)], check=False)


@pytest.mark.parametrize("kind", ["fifo", "symlink", "huge"])
def test_a_ticket_that_is_no_small_regular_file_is_refused_without_blocking(tmp_path, kind):
    """A FIFO would block the reader (the peer worker's tick, or a request's thread) for
    good, a symlink would read another file, a huge file would be read whole: each is a
    one-line refusal, and expire clears it once old."""
    box = TicketBox(tmp_path)
    box.add(ticket_hash("k" * 32), Ticket("sha256:" + "a" * 64, None, time.time() + 60))
    path = box.path / ticket_hash("k" * 32)
    path.unlink()
    target = tmp_path / "elsewhere"
    target.write_bytes(b'{"image_id": "sha256:' + b"a" * 64 + b'", "receiver": null, "expires_at": 1e12}')

    def plant():
        if kind == "fifo":
            os.mkfifo(path)
        elif kind == "symlink":
            path.symlink_to(target)
        else:
            path.write_bytes(b" " * (16 * 1024 * 1024))

    plant()
    old = time.time() - EXPIRED_KEPT_S - 5
    os.utime(path, (old, old), follow_symlinks=False)
    assert box.expire() == 1 and not list(box.path.iterdir())
    plant()
    with pytest.raises(TicketRefused) as refused:
        box.take("k" * 32, "sha256:" + "a" * 64, "198.18.0.12")
    assert refused.value.reason == "ticket_refused" and "\n" not in refused.value.message
    assert not list(box.path.iterdir())  # spent all the same


def test_the_fetch_path_keeps_a_relay_address_path_and_refuses_what_cannot_be_sent():
    from faden_agent.transfers.fetch import fetch_path

    assert fetch_path("http://198.18.0.11:7480") == protocol.PEER_FETCH_PATH
    assert fetch_path("http://198.18.0.1:8000/v1/relay/abc/") == "/v1/relay/abc" + protocol.PEER_FETCH_PATH
    for bad in ("http://198.18.0.1:8000/a b", "http://198.18.0.1:8000/a\r\nX-Evil: 1"):
        with pytest.raises(PeerFailure, match="cannot be sent"):
            fetch_path(bad)
