"""Holds as data (gpu/holds.py): what in two reads of a GPU says it was reset, and when an
Xid stops counting: a reset-class one on a reset seen after it (or a new boot id), a
reboot-class one on a new boot id only, the others on GPU_XID_HOLD_SEC or a remedy before."""

from __future__ import annotations

from faden_agent.workers.inventory.gpu.holds import Holds, read_boot_id, reset_sign

A, B = "a" * 32, "b" * 32


def test_the_signs_of_a_reset():
    base = {"failing": None, "ecc_corrected_volatile": 5, "ecc_uncorrected_volatile": 1, "retired_pending": True}
    assert reset_sign(base, {**base, "ecc_corrected_volatile": 0}) == "ecc_corrected_volatile went back from 5 to 0"
    assert reset_sign(base, {**base, "ecc_uncorrected_volatile": 0}).startswith("ecc_uncorrected_volatile")
    assert reset_sign(base, {**base, "retired_pending": False}) == "retired_pending completed"
    assert (
        reset_sign({"recovery_action": "gpu_reset"}, {"recovery_action": "none"}) == "recovery action gpu_reset cleared"
    )
    assert reset_sign({"failing": "GPU is lost"}, {"failing": None}) == "answers again after: GPU is lost"
    # counts that rise or stand, a pending one still pending, an unknown value: no reset
    assert reset_sign(base, {**base, "ecc_corrected_volatile": 9}) is None
    assert reset_sign(base, {**base, "retired_pending": None}) is None
    assert reset_sign({"recovery_action": "drain_p2p"}, {"recovery_action": "none"}) is None
    assert reset_sign({}, base) is None


def xid(code, at, boot=A):
    return {"event": "xid", "code": code, "at": at, "boot": boot}


def test_each_hold_ends_on_its_remedy():
    now = [10_000.0]
    holds = Holds(3600, A, clock=lambda: now[0])
    assert holds.holds("GPU-a", xid(48, 100.0))  # reset-class: 9900 s later, no reset seen
    assert holds.holds("GPU-a", xid(79, 100.0))  # reboot-class
    assert not holds.holds("GPU-a", xid(94, 100.0))  # the clock's ran out
    assert holds.holds("GPU-a", xid(94, 9000.0))
    assert not holds.holds("GPU-a", xid(13, 9999.0))  # an application's: no verdict at all
    holds.reset_seen("GPU-a", "ecc_corrected_volatile went back from 5 to 0", at=9500.0)
    assert not holds.holds("GPU-a", xid(48, 100.0)) and not holds.holds("GPU-a", xid(94, 9000.0))
    assert holds.holds("GPU-a", xid(48, 9600.0))  # after the reset
    assert holds.holds("GPU-a", xid(79, 100.0))  # a reset does not end a reboot-class Xid
    assert holds.holds("GPU-b", xid(48, 100.0))  # another GPU's reset
    # a new boot id: every Xid of the earlier boot ends
    rebooted = Holds(3600, B, clock=lambda: now[0])
    assert not rebooted.holds("GPU-a", xid(79, 100.0)) and not rebooted.holds("GPU-a", xid(48, 9999.0))
    assert rebooted.holds("GPU-a", xid(79, 100.0, boot=B))
    # kept by an earlier version without a boot id: the clock it had then
    assert not holds.holds("GPU-a", {"event": "xid", "code": 79, "at": 100.0})
    assert holds.holds("GPU-a", {"event": "xid", "code": 79, "at": 9000.0})
    # no time, a time that is no number: nothing held
    for bad in ({"event": "xid", "code": 48}, {"event": "xid", "code": 48, "at": float("inf")}):
        assert not holds.holds("GPU-a", bad)
    # a fatal SXid holds for a GPU until its reset
    sxid = {"event": "sxid_fatal", "code": 20034, "at": 9600.0, "boot": A}
    assert holds.holds("GPU-b", sxid) and not Holds(1, A, clock=lambda: 1e9).holds("GPU-b", {**sxid, "boot": B})


def test_the_boot_id_is_read_as_journald_writes_it(tmp_path):
    path = tmp_path / "boot_id"
    path.write_text("6f1c2d3e-4b5a-4c7d-8e9f-0a1b2c3d4e5f\n")
    assert read_boot_id(path) == "6f1c2d3e4b5a4c7d8e9f0a1b2c3d4e5f"
    for junk in ("", "not a boot id", "x" * 500):
        path.write_text(junk)
        assert read_boot_id(path) is None
    assert read_boot_id(tmp_path / "missing") is None
