"""A small client of the reference backend's admin API (docs/protocol.md, "Admin API").

Used by `faden-agent admin ...` and by the tests (tests/backendproc.py).
"""

from __future__ import annotations

from typing import Any

import requests

ADMIN = "/api/admin/system"


class AdminError(RuntimeError):
    pass


class AdminClient:
    def __init__(self, url: str, admin_token: str, *, verify: bool | str = True, timeout_s: float = 10.0):
        self.url = url.rstrip("/")
        self.timeout_s = timeout_s
        self.session = requests.Session()
        self.verify = verify  # per request: a Session-level value loses to REQUESTS_CA_BUNDLE
        self.session.headers["Authorization"] = f"Bearer {admin_token}"

    def call(self, method: str, path: str, body: Any = None, **params: Any) -> Any:
        try:
            reply = self.session.request(
                method,
                self.url + ADMIN + path,
                json=body,
                params=params or None,
                timeout=self.timeout_s,
                verify=self.verify,
            )
        except requests.RequestException as exc:
            raise AdminError(f"{self.url} did not answer: {exc.__class__.__name__}") from None
        if reply.status_code >= 400:
            try:
                detail = reply.json().get("message", reply.text)
            except ValueError:
                detail = reply.text[:200]
            raise AdminError(f"{method} {ADMIN}{path}: HTTP {reply.status_code}: {detail}")
        return reply.json()

    def mint_token(self) -> str:
        return self.call("POST", "/nodes/enrollment-tokens")["token"]

    def nodes(self) -> list[dict[str, Any]]:
        return self.call("GET", "/nodes")["nodes"]

    def node(self, node_id: str) -> dict[str, Any]:
        return self.call("GET", f"/nodes/{node_id}")

    def revoke(self, node_id: str) -> dict[str, Any]:
        return self.call("DELETE", f"/nodes/{node_id}")

    def send_command(
        self, node_id: str, kind: str, spec: Any = None, command_id: str | None = None, deadline: float | None = None
    ) -> str:
        body: dict[str, Any] = {"kind": kind, "spec": spec if spec is not None else {}}
        if command_id:
            body["id"] = command_id
        if deadline is not None:
            body["deadline"] = deadline
        return self.call("POST", f"/nodes/{node_id}/commands", body)["id"]

    def command(self, command_id: str) -> dict[str, Any]:
        return self.call("GET", f"/commands/{command_id}")

    def events(self, node_id: str, limit: int = 10_000) -> list[dict[str, Any]]:
        return self.call("GET", f"/nodes/{node_id}/events", limit=limit)["events"]

    def heartbeats(self, node_id: str, limit: int = 10_000) -> list[dict[str, Any]]:
        return self.call("GET", f"/nodes/{node_id}/heartbeats", limit=limit)["heartbeats"]

    def timeline(self, node_id: str) -> list[dict[str, Any]]:
        return self.call("GET", f"/nodes/{node_id}/timeline")["timeline"]

    def inventory(self, node_id: str) -> dict[str, Any]:
        return self.call("GET", f"/nodes/{node_id}/inventory")

    def logs(self, node_id: str) -> list[dict[str, Any]]:
        return self.call("GET", f"/nodes/{node_id}/logs")["lines"]

    def set_cluster(self, cluster: str, node_ids: list[str]) -> dict[str, Any]:
        return self.call("POST", f"/clusters/{cluster}", {"nodes": node_ids})

    def traffic(self, cluster: str) -> dict[str, Any]:
        return self.call("GET", f"/clusters/{cluster}/traffic")

    def fanout(self, cluster: str, image_id: str, image: str | None = None) -> str:
        """Start putting an image on every machine of the cluster; the fan-out's id."""
        return self.call("POST", f"/clusters/{cluster}/fanouts", {"image_id": image_id, "image": image})["id"]

    def relay(self, image_id: str, holder: str, receiver: str, image: str | None = None) -> dict[str, Any]:
        """Relay an image through the backend: {"id", "relay_command", "fetch_command"}."""
        return self.call(
            "POST", "/relays", {"image_id": image_id, "holder": holder, "receiver": receiver, "image": image}
        )

    def fanout_status(self, cluster: str, fanout_id: str) -> dict[str, Any]:
        return self.call("GET", f"/clusters/{cluster}/fanouts/{fanout_id}")

    def faults(self, **switches: Any) -> dict[str, Any]:
        return self.call("POST", "/faults", switches) if switches else self.call("GET", "/faults")

    def requests_log(self, since: float = 0.0) -> list[dict[str, Any]]:
        return self.call("GET", "/requests", since=since)["requests"]

    def stats(self) -> dict[str, Any]:
        return self.call("GET", "/stats")
