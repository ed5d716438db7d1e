"""The receiver's check of each `docker save` shape (issue 37): seconds and MB/s to verify
the same image as 20.10 writes it, as the classic store's OCI layout of 25-28, and as the
containerd store's (gzip'd layers: unpacked and hashed as they pass), and the peak memory
the check holds (tracemalloc: the metadata kept, never a layer).

    python3 bench/peer_shapes_bench.py [--mb 64] [--rounds 3] [--json PATH]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
import tracemalloc
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run as a file: the repository root

from bench.output import emit
from faden_agent.transfers.archive import ArchiveVerifier, ChunkReader
from tests.support.imageshapes import classic_layout, containerd_layout, digest_of, read_v1, synthetic_v1, write_tar


def layer(megabytes: int) -> bytes:
    """A layer of text-like data (gzip gets it to about a third, as with real layers)."""
    words = [os.urandom(6).hex().encode() for _ in range(4096)]
    body = b" ".join(words[i % 4096] for i in range(megabytes * (1 << 20) // 13))
    return write_tar([("data", body)])


def verify_once(archive: bytes, image_id: str) -> tuple[float, int]:
    verifier = ArchiveVerifier(image_id, None, set(), 1 << 40)
    pieces = (archive[i : i + (1 << 20)] for i in range(0, len(archive), 1 << 20))
    tracemalloc.start()
    started = time.perf_counter()
    for _ in verifier.verified(ChunkReader(pieces)):
        pass
    seconds = time.perf_counter() - started
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    return seconds, peak


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--mb", type=int, default=64, help="uncompressed megabytes of the image (3 layers)")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    sizes = [args.mb // 2, args.mb // 4, args.mb - args.mb // 2 - args.mb // 4]
    v1 = synthetic_v1([layer(max(1, mb)) for mb in sizes])
    config_id = digest_of(read_v1(v1)[0])
    shapes = {
        "20.10": (v1, config_id),
        "classic 25-28": (classic_layout(v1), config_id),
        "containerd (gzip, nested index)": containerd_layout(v1, nested=True),
    }
    figures: dict[str, dict[str, float]] = {}
    for name, (archive, image_id) in shapes.items():
        runs = [verify_once(archive, image_id) for _ in range(args.rounds)]
        seconds = statistics.median(s for s, _ in runs)
        figures[name] = {
            "archive_mb": round(len(archive) / (1 << 20), 1),
            "seconds": round(seconds, 3),
            "uncompressed_mb_per_s": round(args.mb / seconds, 1),
            "peak_traced_mib": round(max(p for _, p in runs) / (1 << 20), 1),
        }
    emit({"image_mb": args.mb, "rounds": args.rounds, "shapes": figures}, args.json)


if __name__ == "__main__":
    main()
