"""The traffic record: what this machine sends to each peer machine of its cluster, its
NICs and its InfiniBand/RoCE ports (docs/protocol.md, "Traffic record").
"""

from __future__ import annotations

import logging
import os
import re
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from faden_agent import protocol
from faden_agent.node.cluster import PeerFile
from faden_agent.workers.inventory.traffic import infiniband, nics, sockdiag
from faden_agent.workers.inventory.traffic.nccl import FallbackWatch
from faden_agent.workers.inventory.traffic.tcp import PeerView, TcpAccounting

log = logging.getLogger(__name__)

RATE_CHANGE = 0.10  # a rate that moved by 10 % ...
RATE_FLOOR = 64 * 1024  # ... and by at least 64 KiB/s is a change
RTT_CHANGE = 0.20  # an RTT that moved by 20 % and by at least 1 ms
RTT_FLOOR_MS = 1.0
NETNS_RECOUNT_S = 60.0
LISTEN_BATCH_S = 1.0  # the destroy listener wakes at most this often


def _rate(now: int | None, before: int | None, seconds: float | None) -> float | None:
    if now is None or before is None or not seconds:
        return None
    return round(max(0, now - before) / seconds, 1)


def _ms(values: list[int], pick: Callable[[list[int]], float]) -> float | None:
    return round(pick(values) / 1000.0, 3) if values else None


class TrafficReporter:
    def __init__(
        self,
        state_dir: Path,
        sysfs_root: Path,
        put_latest: Callable[[str, dict], Any],
        put_event: Callable[[dict, str], Any],
        dump: Callable = sockdiag.dump,
    ):
        self.peers = PeerFile(state_dir)
        self.tcp = TcpAccounting(dump)
        self.sysfs_root = sysfs_root
        self.put_latest, self.put_event = put_latest, put_event
        self.fallback = FallbackWatch()
        self.listener: sockdiag.DestroyListener | None = None
        self.listener_problem: str | None = None
        self._previous: dict[str, Any] | None = None  # the last sample's counters
        self.last_sent: dict[str, Any] | None = None
        self.last_sample: dict[str, Any] | None = None  # sent or not: for gauges (ps, /metrics)
        self.samples = self.sent = 0
        self._netns: tuple[float, int | None] = (0.0, None)
        self._interfaces: dict[str, str | None] = {}  # local address -> its interface (cached)

    # ------------------------------------------------------------------ threads

    def open_listener(self) -> bool:
        try:
            self.listener = sockdiag.DestroyListener()
        except OSError as exc:
            self.listener_problem = f"TCP destroy notifications unavailable ({exc.strerror or exc})"
            log.warning("traffic: %s; connections closed between samples are not counted", self.listener_problem)
            return False
        return True

    def listen(self, stop: threading.Event) -> None:
        """Until stopped: hand every destroyed socket's last counters to the accounting.
        Blocks in the kernel while nothing closes; on a busy host it wakes at most once per
        LISTEN_BATCH_S (the kernel queues the notifications meanwhile, 4 MiB of them)."""
        assert self.listener is not None
        try:
            while not stop.is_set():
                closed = self.listener.read()
                if closed:
                    self.tcp.closed(closed)
                stop.wait(LISTEN_BATCH_S)
        except OSError as exc:  # the records say so from now on; sampling goes on
            self.listener_problem = f"TCP destroy notifications failed ({exc.strerror or exc})"
            log.warning("traffic: %s; connections closed between samples are no longer counted", self.listener_problem)
        finally:
            self.listener.close()

    def stop(self) -> None:
        """Wake the listener blocked in the kernel (the stop event is set)."""
        if self.listener is not None:
            self.listener.wake()

    def run(self, stop: threading.Event, interval_s: float) -> None:
        while not stop.is_set():
            try:
                self.report()
            except Exception:  # e.g. the outbox disk is full: try again next time
                log.exception("traffic sample failed")
            stop.wait(interval_s)

    # ------------------------------------------------------------------ one cycle

    def report(self) -> dict[str, Any]:
        data = self.last_sample = self.sample()
        if changed(self.last_sent, data):
            self.put_latest(protocol.TRAFFIC, data)
            self.last_sent = data
            self.sent += 1
        event = self.fallback.check(data)
        if event is not None:
            self.put_event(event, f"ev:traffic:{event['type']}:{event['since']}")
        return data

    def sample(self) -> dict[str, Any]:
        self.peers.refresh()
        if self.listener is not None and not self.listener_problem:
            self._subscribe(bool(self.peers.by_address))
        at, mono = time.time(), time.monotonic()
        views = self.tcp.sample(self.peers.by_address)
        counters: dict[str, Any] = {"nics": nics.read_nics(), "ib": infiniband.read_ports(self.sysfs_root)}
        previous = self._previous
        seconds = mono - previous["mono"] if previous else None
        data = {
            "collected_at": at,
            "interval_s": round(seconds, 3) if seconds else None,
            "cluster": self.peers.cluster,
            "peers": [self._peer(address, views[address], previous, seconds) for address in sorted(views)],
            "nics": self._nics(counters["nics"], previous, seconds),
            "infiniband": self._ports(counters["ib"], previous, seconds),
            "not_measured": self._blind_spots(),
        }
        self._previous = {
            "mono": mono,
            "peers": {
                a: (v.totals.sent, v.totals.received, v.totals.sent_all, v.totals.retrans) for a, v in views.items()
            },
            "nics": counters["nics"],
            "ib": counters["ib"],
        }
        self.samples += 1
        return data

    def _subscribe(self, on: bool) -> None:
        """Destroy notifications only while the backend names peers: without peers none of
        them counts, and every TCP close on the host would wake the listener."""
        assert self.listener is not None
        try:
            self.listener.subscribe(on)
        except OSError as exc:
            self.listener_problem = f"TCP destroy notifications failed ({exc.strerror or exc})"
            log.warning("traffic: %s; connections closed between samples are no longer counted", self.listener_problem)

    def _peer(self, address: str, view: PeerView, previous: dict | None, seconds: float | None) -> dict[str, Any]:
        totals = view.totals
        before = (previous or {}).get("peers", {}).get(address)
        sent_all = totals.sent_all - before[2] if before else None
        retrans = totals.retrans - before[3] if before else None
        # The busiest live socket's local address, else that of the last socket seen.
        busiest = view.local_bytes
        local = max(busiest, key=busiest.__getitem__) if busiest else self.tcp.local_of.get(address)
        if local is not None and local not in self._interfaces:
            self._interfaces[local] = nics.interface_of(local)
        interface = self._interfaces.get(local) if local else None
        return {
            "node_id": self.peers.by_address.get(address),
            "address": address,
            "sent_bytes": totals.sent,  # since this agent first saw the peer
            "received_bytes": totals.received,
            "sent_bytes_per_s": _rate(totals.sent, before[0] if before else None, seconds),
            "received_bytes_per_s": _rate(totals.received, before[1] if before else None, seconds),
            "connections": view.connections,
            "rtt_ms": _ms(view.rtt_us, lambda v: sum(v) / len(v)),
            "min_rtt_ms": _ms(view.min_rtt_us, min),
            "retransmit_ratio": round(retrans / sent_all, 5) if sent_all else None,
            "interface": interface,
        }

    @staticmethod
    def _nics(now: dict[str, dict], previous: dict | None, seconds: float | None) -> list[dict[str, Any]]:
        out = []
        for name, nic in sorted(now.items()):
            before = ((previous or {}).get("nics") or {}).get(name, {}).get("counters", {})
            c = nic["counters"]
            out.append(
                {
                    "name": name,
                    "up": nic["up"],
                    "speed_mbps": nic["speed_mbps"],
                    "tx_bytes_per_s": _rate(c["tx_bytes"], before.get("tx_bytes"), seconds),
                    "rx_bytes_per_s": _rate(c["rx_bytes"], before.get("rx_bytes"), seconds),
                    "errors": c["errors"],
                    "drops": c["drops"],
                    "errors_per_s": _rate(c["errors"], before.get("errors"), seconds),
                    "drops_per_s": _rate(c["drops"], before.get("drops"), seconds),
                }
            )
        return out

    @staticmethod
    def _ports(now: list[dict] | None, previous: dict | None, seconds: float | None) -> list[dict[str, Any]] | None:
        if now is None:
            return None  # no RDMA device on this host
        earlier = {(p["device"], p["port"]): p.get("counters") or {} for p in (previous or {}).get("ib") or []}
        out = []
        for port in now:
            entry = dict(port)
            counters = port.get("counters")
            if counters is not None:
                before = earlier.get((port["device"], port["port"]), {})
                entry["tx_bytes_per_s"] = _rate(counters["tx_bytes"], before.get("tx_bytes"), seconds)
                entry["rx_bytes_per_s"] = _rate(counters["rx_bytes"], before.get("rx_bytes"), seconds)
            out.append(entry)
        return out

    def _blind_spots(self) -> list[str]:
        spots = []
        if self.listener_problem:
            spots.append(f"connections closed between samples: {self.listener_problem}")
        elif self.listener is not None and self.listener.lost:
            spots.append(
                f"connections closed between samples: {self.listener.lost} batches of destroy "
                "notifications lost (kernel buffer full)"
            )
        others = self._other_netns()
        if others:
            spots.append(f"sockets in {others} other network namespaces (containers not on the host network)")
        if not self.peers.by_address:
            spots.append("per-peer traffic: the backend named no peer machines (not in a cluster)")
        return spots

    def _other_netns(self) -> int | None:
        """How many network namespaces other than ours hold processes (cached a minute)."""
        checked, count = self._netns
        if time.monotonic() - checked < NETNS_RECOUNT_S:
            return count
        try:
            own = os.readlink("/proc/self/ns/net")
            seen = set()
            for pid in os.listdir("/proc"):
                if pid.isdigit():
                    try:
                        seen.add(os.readlink(f"/proc/{pid}/ns/net"))
                    except OSError:
                        pass
            count = len(seen - {own})
        except OSError:
            count = None
        self._netns = (time.monotonic(), count)
        return count


def changed(before: dict[str, Any] | None, now: dict[str, Any]) -> bool:
    """Whether `now` differs from the last record sent beyond the thresholds."""
    if before is None:
        return True
    if before["cluster"] != now["cluster"] or _notes(before) != _notes(now):
        return True
    pairs = [(before["peers"], now["peers"], "address"), (before["nics"], now["nics"], "name")]
    for old_list, new_list, key in pairs:
        old = {item[key]: item for item in old_list}
        new = {item[key]: item for item in new_list}
        if old.keys() != new.keys():
            return True
        for name, item in new.items():
            if _item_changed(old[name], item):
                return True
    old_ib, new_ib = before["infiniband"], now["infiniband"]
    if (old_ib is None) != (new_ib is None):
        return True
    if new_ib is not None:
        if [(p["device"], p["port"], p["state"]) for p in old_ib] != [
            (p["device"], p["port"], p["state"]) for p in new_ib
        ]:
            return True
        if any(_item_changed(o, n) for o, n in zip(old_ib, new_ib, strict=True)):  # same ports, checked above
            return True
    return False


def _notes(record: dict[str, Any]) -> set[str]:
    """The blind spots, their counts left out: a note coming or going is a change, its count
    moving is not (every container started or stopped changes the count of network
    namespaces: a record each)."""
    return {re.sub(r"\d+", "N", note) for note in record["not_measured"]}


def _item_changed(old: dict[str, Any], new: dict[str, Any]) -> bool:
    for key, value in new.items():
        previous = old.get(key)
        if key.endswith("_per_s"):
            if (previous is None) != (value is None):
                return True
            if value is not None and abs(value - previous) > max(RATE_CHANGE * max(value, previous), RATE_FLOOR):
                return True
        elif key.endswith("rtt_ms"):
            if (previous is None) != (value is None):
                return True
            if value is not None and abs(value - previous) > max(RTT_CHANGE * max(value, previous), RTT_FLOOR_MS):
                return True
        elif key in ("connections", "interface", "up", "speed_mbps", "state", "errors", "drops", "node_id"):
            if value != previous:
                return True
    return False
