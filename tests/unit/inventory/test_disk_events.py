"""DiskWatch's transitions: one disk.low, one disk.recovered, a margin between them, and
only the file systems of the state directory, Docker's data root and the Ray logs."""

from __future__ import annotations

from faden_agent.config import load_config
from faden_agent.workers.inventory.disk_events import DiskWatch, record_id

GiB = 1 << 30


def disk(free: int, roles=("docker",), total: int = 100 * GiB) -> dict:
    return {"paths": ["/data"], "roles": list(roles), "mountpoint": "/data", "total": total, "usage": {"free": free}}


def test_low_once_then_recovered_only_past_the_margin():
    watch = DiskWatch(load_config({}), measure=lambda: [{"what": "images", "bytes": 7}])
    assert watch.update([disk(11 * GiB)]) == []  # threshold: 10 % of 100 GiB
    (low,) = watch.update([disk(9 * GiB)])
    assert (low["type"], low["threshold_bytes"], low["free_bytes"]) == ("disk.low", 10 * GiB, 9 * GiB)
    assert low["consumers"] == [{"what": "images", "bytes": 7}] and low["roles"] == ["docker"]
    assert watch.update([disk(8 * GiB)]) == []  # still low: no second event
    assert watch.update([disk(10 * GiB + GiB // 5)]) == []  # above, but within the 5 % margin
    (recovered,) = watch.update([disk(11 * GiB)])
    assert recovered["type"] == "disk.recovered"
    assert record_id(low) != record_id(recovered) and record_id(low).startswith("ev:disk.low:/data:")


def test_other_file_systems_and_missing_paths_are_not_watched():
    watch = DiskWatch(load_config({}), measure=list)
    missing = {"paths": ["/gone"], "roles": ["state"], "error": "No such file or directory"}
    assert watch.update([disk(1, roles=("root", "configured")), missing]) == []
    (low,) = watch.update([disk(1, roles=("root", "ray_logs"))])
    assert low["roles"] == ["ray_logs"]
