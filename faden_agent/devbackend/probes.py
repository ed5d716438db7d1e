"""Probe rounds in the reference backend: measure the cluster's reachability and
bandwidth matrix with `traffic.probe`, every machine against every other.
"""

from __future__ import annotations

import time
from typing import Any

from faden_agent import protocol
from faden_agent.devbackend.fanout import command_outcome, mint_ticket, peer_address
from faden_agent.devbackend.rounds import ClusterRound

BOUND_KEYS = ("duration_s", "max_bytes", "round_trips")  # of traffic.probe; null: the agent's default
POLL_S = 0.2
SERVE_WAIT_S = 30.0
# What a probe may take beyond its three phases: connecting, draining, the answer's way back.
PROBE_SLACK_S = 30.0


def rounds(machines: list[str]) -> list[list[tuple[str, str]]]:
    """Every pair once, in rounds where no machine appears twice (the circle method)."""
    ring: list[str | None] = list(machines) + ([None] if len(machines) % 2 else [])
    schedule = []
    for _ in range(len(ring) - 1):
        half = len(ring) // 2
        pairs = [(ring[i], ring[-1 - i]) for i in range(half)]
        schedule.append([(a, b) for a, b in pairs if a is not None and b is not None])
        ring = [ring[0], ring[-1], *ring[1:-1]]
    return [pairs for pairs in schedule if pairs]


class ProbeRound(ClusterRound):
    kind = "probes"

    def __init__(self, backend: Any, cluster: str, bounds: dict[str, Any]):
        super().__init__(backend, cluster)
        self.bounds = bounds  # duration_s, max_bytes, round_trips (the agent's defaults where absent)
        self.skipped: list[str] = []  # members whose agent cannot probe
        self.pairs: list[dict[str, Any]] = []  # {prober, target, command_id, state, reason}

    def _detail(self) -> dict[str, Any]:
        return {"bounds": self.bounds, "skipped": list(self.skipped), "pairs": [dict(p) for p in self.pairs]}

    def probe_deadline_s(self) -> float:
        return 3 * float(self.bounds.get("duration_s") or 2.0) + PROBE_SLACK_S

    # --- the loop

    def _run(self) -> None:
        store = self.backend.store
        members = store.members(self.cluster)
        capable = [n for n in members if protocol.PROBE_CAPABILITY in ((store.node(n) or {}).get("capabilities") or ())]
        schedule = rounds(capable)
        with self._lock:
            self.skipped = [n for n in members if n not in capable]
        tickets = self._serve(schedule)
        for pairs in schedule:
            running = [self._probe(prober, target, tickets[(prober, target)]) for prober, target in pairs]
            while running:
                time.sleep(POLL_S)
                for pair in list(running):
                    state, reason = command_outcome(store, pair["command_id"])
                    if state is not None:
                        running.remove(pair)
                        with self._lock:
                            pair.update(state=state, reason=reason)
        with self._lock:
            self.finish("done")

    def _serve(self, schedule: list[list[tuple[str, str]]]) -> dict[tuple[str, str], str]:
        """One traffic.serve per probed machine with a ticket hash per prober; the tickets."""
        store = self.backend.store
        tickets: dict[tuple[str, str], str] = {}
        hashes: dict[str, list[dict[str, str | None]]] = {}
        for prober, target in (pair for pairs in schedule for pair in pairs):
            ticket, ticket_sha256 = mint_ticket()
            tickets[(prober, target)] = ticket
            receiver = (store.node(prober) or {}).get("advertise_host")
            hashes.setdefault(target, []).append({"ticket_sha256": ticket_sha256, "receiver": receiver})
        ttl_s = len(schedule) * (self.probe_deadline_s() + 10) + 60
        serves = [
            store.add_command(target, "traffic.serve", {"tickets": entries, "ttl_s": ttl_s}, None, None)["id"]
            for target, entries in hashes.items()
        ]
        self.backend.notify_streams()
        deadline = time.monotonic() + SERVE_WAIT_S  # the tickets must be known before they are presented
        while any(command_outcome(store, s)[0] is None for s in serves) and time.monotonic() < deadline:
            time.sleep(POLL_S / 4)
        return tickets

    def _probe(self, prober: str, target: str, ticket: str) -> dict[str, Any]:
        store = self.backend.store
        spec = {
            "peers": [{"machine": target, "address": peer_address(store, target), "ticket": ticket}],
            **{k: v for k, v in self.bounds.items() if v is not None},
            "deadline_s": self.probe_deadline_s(),
        }
        command = store.add_command(prober, "traffic.probe", spec, None, None)
        self.backend.notify_streams()
        pair = {"prober": prober, "target": target, "command_id": command["id"], "state": "running", "reason": None}
        with self._lock:
            self.pairs.append(pair)
        return pair
