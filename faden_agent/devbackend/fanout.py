"""Fan-out of one image to every machine of a cluster, in the reference backend."""

from __future__ import annotations

import hashlib
import secrets
import time
from typing import Any

from faden_agent import protocol
from faden_agent.devbackend.rounds import ClusterRound

DEFAULT_PEER_PORT = 7480
ATTEMPTS = 3
POLL_S = 0.2
SERVE_WAIT_S = 30.0


def command_outcome(store: Any, command_id: str) -> tuple[str | None, str | None]:
    """(terminal state, reason) of a command; (None, None) while it runs."""
    command = store.command(command_id) or {}
    if command.get("state") not in protocol.TERMINAL_STATES:
        return None, None
    end: dict[str, Any] = next(
        (t for t in reversed(command.get("timeline") or []) if t.get("state") == command["state"]), {}
    )
    return command["state"], end.get("reason")


def peer_address(store: Any, node_id: str) -> str:
    """The node's peer port: advertise_scheme://advertise_host:peer_port."""
    node = store.node(node_id) or {}
    inventory = (store.inventory(node_id) or {}).get("inventory") or {}
    port = (inventory.get("host") or {}).get("peer_port") or DEFAULT_PEER_PORT
    return f"{node.get('advertise_scheme') or 'http'}://{node.get('advertise_host')}:{port}"


def image_size(store: Any, node_id: str, image_id: str) -> int | None:
    """The image's size in the holder's last inventory: the receiver's bound on the fetch."""
    images = (((store.inventory(node_id) or {}).get("inventory") or {}).get("docker") or {}).get("images") or []
    size = next((image.get("size") for image in images if image.get("id") == image_id), None)
    return size if isinstance(size, int) and not isinstance(size, bool) and size > 0 else None


def mint_ticket() -> tuple[str, str]:
    """A one-time ticket and its sha256 (the holder gets only the hash)."""
    ticket = secrets.token_urlsafe(32)
    return ticket, hashlib.sha256(ticket.encode()).hexdigest()


class Fanout(ClusterRound):
    kind = "fanout"

    def __init__(self, backend: Any, cluster: str, image_id: str, reference: str | None, ttl_s: float = 1800.0):
        super().__init__(backend, cluster)
        self.image_id = image_id
        self.reference = reference
        self.ttl_s = ttl_s
        self.transfers: list[dict[str, Any]] = []  # {target, source, command_id, state, reason, started_at, ended_at}

    def _detail(self) -> dict[str, Any]:
        return {"image_id": self.image_id, "transfers": [dict(t) for t in self.transfers]}

    # --- the loop

    def _run(self) -> None:
        store = self.backend.store
        members = store.members(self.cluster)
        holders = [n for n in members if self._holds(n)]
        targets = [n for n in members if n not in holders]
        tries = dict.fromkeys(targets, 0)
        running: dict[str, dict[str, Any]] = {}  # fetch command id -> transfer
        while (targets and holders) or running:
            busy = {t["source"] for t in running.values()}
            for holder in [h for h in holders if h not in busy][: len(targets)]:
                target = targets.pop(0)
                tries[target] += 1
                transfer = self._send(holder, target)
                running[transfer["command_id"]] = transfer
            time.sleep(POLL_S)
            for command_id, transfer in list(running.items()):
                state, reason = self._outcome(command_id)
                if state is None:
                    continue
                del running[command_id]
                with self._lock:
                    transfer.update(state=state, reason=reason, ended_at=time.time())
                if state == protocol.SUCCEEDED:
                    holders.append(transfer["target"])  # a new source for the next round
                elif tries[transfer["target"]] < ATTEMPTS:
                    targets.append(transfer["target"])
        with self._lock:
            self.finish("done" if all(self._holds(n) or n in holders for n in members) else "failed")

    def _outcome(self, command_id: str) -> tuple[str | None, str | None]:
        return command_outcome(self.backend.store, command_id)

    def _inventory(self, node_id: str) -> dict[str, Any]:
        return (self.backend.store.inventory(node_id) or {}).get("inventory") or {}

    def _holds(self, node_id: str) -> bool:
        images = (self._inventory(node_id).get("docker") or {}).get("images") or []
        return any(image.get("id") == self.image_id for image in images)

    def _address(self, node_id: str) -> str:
        return peer_address(self.backend.store, node_id)

    def _send(self, holder: str, target: str) -> dict[str, Any]:
        store = self.backend.store
        ticket, ticket_sha256 = mint_ticket()
        receiver = (store.node(target) or {}).get("advertise_host")
        serve = store.add_command(
            holder,
            "image.serve",
            {
                "image_id": self.image_id,
                "receiver": receiver,
                "ttl_s": self.ttl_s,
                "ticket_sha256": ticket_sha256,
            },
            None,
            None,
        )
        self.backend.notify_streams()
        deadline = time.monotonic() + SERVE_WAIT_S  # the ticket must be known before it is presented
        while self._outcome(serve["id"])[0] is None and time.monotonic() < deadline:
            time.sleep(POLL_S / 4)
        spec: dict[str, Any] = {
            "image_id": self.image_id,
            "peers": [{"address": self._address(holder), "ticket": ticket}],
        }
        if self.reference:
            spec["image"] = self.reference
        size = image_size(store, holder, self.image_id)
        if size:
            spec["size_bytes"] = size
        command = store.add_command(target, "image.fetch", spec, None, None)
        self.backend.notify_streams()
        transfer = {
            "target": target,
            "source": holder,
            "command_id": command["id"],
            "state": "running",
            "reason": None,
            "started_at": time.time(),
            "ended_at": None,
        }
        with self._lock:
            self.transfers.append(transfer)
        return transfer
