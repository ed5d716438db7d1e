"""This machine's fingerprint: a hash of facts that survive reboots and differ between two
machines made from one disk or VM image (machine-id, DMI ids and serials, physical NICs' MAC
addresses). Only the hash leaves the machine (enrollment facts, detail heartbeats), so the
backend can see two machines speaking as one node; the facts themselves are never sent."""

from __future__ import annotations

import functools
import hashlib
import os
from pathlib import Path

import orjson

from faden_agent.node.sysfs import read_attr

MACHINE_ID_FILES = ("/etc/machine-id", "/var/lib/dbus/machine-id")
DMI_FIELDS = ("product_uuid", "product_serial", "board_serial", "chassis_serial", "sys_vendor", "product_name")
MAX_NICS = 64


def machine_facts(sysfs_root: Path) -> dict[str, object]:
    """The facts hashed; absent ones left out (a container, a non-root run)."""
    facts: dict[str, object] = {}
    machine_id = next(filter(None, map(read_attr, MACHINE_ID_FILES)), None)
    if machine_id:
        facts["machine_id"] = machine_id
    dmi = Path(sysfs_root) / "class" / "dmi" / "id"
    for field in DMI_FIELDS:
        value = read_attr(dmi / field)
        if value:
            facts[field] = value
    net = Path(sysfs_root) / "class" / "net"
    try:
        names = sorted(os.listdir(net))[:MAX_NICS]
    except OSError:
        names = []
    # physical NICs only (a `device` link): veth, bridges and docker0 come and go
    macs = sorted(filter(None, (read_attr(net / n / "address") for n in names if (net / n / "device").exists())))
    if macs:
        facts["macs"] = macs
    return facts


@functools.lru_cache(maxsize=4)
def fingerprint(sysfs_root: Path) -> str:
    """sha256 (first 32 hex digits) of the facts; the same for every process of one machine."""
    facts = machine_facts(sysfs_root)
    return hashlib.sha256(orjson.dumps(facts, option=orjson.OPT_SORT_KEYS)).hexdigest()[:32]
