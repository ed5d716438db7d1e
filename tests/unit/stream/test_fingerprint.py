"""The machine fingerprint (node/fingerprint.py) from real files in a sysfs-shaped tree: lasting
hardware facts only."""

from __future__ import annotations

import os

from faden_agent.node.fingerprint import fingerprint, machine_facts


def sysfs(root, uuid: str, nics: dict[str, tuple[str, bool]]):
    dmi = root / "class" / "dmi" / "id"
    dmi.mkdir(parents=True)
    (dmi / "product_uuid").write_text(uuid + "\n")
    os.mkfifo(dmi / "board_serial")  # never blocks, never counts
    for name, (mac, physical) in nics.items():
        nic = root / "class" / "net" / name
        nic.mkdir(parents=True)
        (nic / "address").write_text(mac + "\n")
        if physical:
            (nic / "device").mkdir()
    return root


def test_the_fingerprint_hashes_lasting_hardware_facts_only(tmp_path):
    one = sysfs(tmp_path / "one", "uuid-1", {"eno1": ("aa:bb", True), "veth9": ("11:22", False)})
    facts = machine_facts(one)
    assert facts["product_uuid"] == "uuid-1" and facts["macs"] == ["aa:bb"]  # veth left out
    assert "board_serial" not in facts
    print_ = fingerprint(one)
    assert len(print_) == 32 and "uuid-1" not in print_
    # A veth coming and going changes nothing; another board does.
    same = sysfs(tmp_path / "same", "uuid-1", {"eno1": ("aa:bb", True)})
    other = sysfs(tmp_path / "other", "uuid-2", {"eno1": ("aa:bb", True)})
    assert fingerprint(same) == print_ != fingerprint(other)
