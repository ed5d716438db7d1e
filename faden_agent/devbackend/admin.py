"""A small client of the reference backend's admin API (docs/protocol.md, "Admin API").

Used by `faden-agent admin ...` and by the tests (tests/support/backendproc.py).
"""

from __future__ import annotations

from typing import Any

import requests

from faden_agent import protocol


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
        """One admin request; `path` is a protocol.ADMIN_..._PATH, filled in."""
        try:
            reply = self.session.request(
                method,
                self.url + path,
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
            raise AdminError(f"{method} {path}: HTTP {reply.status_code}: {detail}")
        return reply.json()

    def mint_token(self) -> str:
        return self.call("POST", protocol.ADMIN_ENROLLMENT_TOKENS_PATH)["token"]

    def nodes(self) -> list[dict[str, Any]]:
        return self.call("GET", protocol.ADMIN_NODES_PATH)["nodes"]

    def node(self, node_id: str) -> dict[str, Any]:
        return self.call("GET", protocol.ADMIN_NODE_PATH.format(node_id=node_id))

    def revoke(self, node_id: str) -> dict[str, Any]:
        return self.call("DELETE", protocol.ADMIN_NODE_PATH.format(node_id=node_id))

    def send_command(
        self, node_id: str, kind: str, spec: Any = None, command_id: str | None = None, deadline: float | None = None
    ) -> str:
        body: dict[str, Any] = {"kind": kind, "spec": spec if spec is not None else {}}
        if command_id:
            body["id"] = command_id
        if deadline is not None:
            body["deadline"] = deadline
        return self.call("POST", protocol.ADMIN_NODE_COMMANDS_PATH.format(node_id=node_id), body)["id"]

    def command(self, command_id: str) -> dict[str, Any]:
        return self.call("GET", protocol.ADMIN_COMMAND_PATH.format(command_id=command_id))

    def view(self, node_id: str, view: str, **params: Any) -> Any:
        """One of a node's record views (protocol.ADMIN_NODE_VIEWS)."""
        return self.call("GET", protocol.ADMIN_NODE_VIEW_PATH.format(node_id=node_id, view=view), **params)

    def events(self, node_id: str, limit: int = 10_000) -> list[dict[str, Any]]:
        return self.view(node_id, "events", limit=limit)["events"]

    def heartbeats(self, node_id: str, limit: int = 10_000) -> list[dict[str, Any]]:
        return self.view(node_id, "heartbeats", limit=limit)["heartbeats"]

    def timeline(self, node_id: str) -> list[dict[str, Any]]:
        return self.view(node_id, "timeline")["timeline"]

    def inventory(self, node_id: str) -> dict[str, Any]:
        return self.view(node_id, "inventory")

    def logs(self, node_id: str) -> list[dict[str, Any]]:
        return self.view(node_id, "logs")["lines"]

    def set_cluster(self, cluster: str, node_ids: list[str]) -> dict[str, Any]:
        return self.call("POST", protocol.ADMIN_CLUSTER_PATH.format(cluster=cluster), {"nodes": node_ids})

    def traffic(self, cluster: str) -> dict[str, Any]:
        return self.call("GET", protocol.ADMIN_CLUSTER_TRAFFIC_PATH.format(cluster=cluster))

    def fanout(self, cluster: str, image_id: str, image: str | None = None) -> str:
        """Start putting an image on every machine of the cluster; the fan-out's id."""
        return self.call(
            "POST", protocol.ADMIN_FANOUTS_PATH.format(cluster=cluster), {"image_id": image_id, "image": image}
        )["id"]

    def relay(self, image_id: str, holder: str, receiver: str, image: str | None = None) -> dict[str, Any]:
        """Relay an image through the backend: {"id", "relay_command", "fetch_command"}."""
        return self.call(
            "POST",
            protocol.ADMIN_RELAYS_PATH,
            {"image_id": image_id, "holder": holder, "receiver": receiver, "image": image},
        )

    def fanout_status(self, cluster: str, fanout_id: str) -> dict[str, Any]:
        return self.call("GET", protocol.ADMIN_FANOUT_PATH.format(cluster=cluster, fanout_id=fanout_id))

    def probe(self, cluster: str, **bounds: Any) -> str:
        """Start probing every pair of the cluster's machines (duration_s, max_bytes,
        round_trips: traffic.probe's bounds); the probe round's id."""
        return self.call("POST", protocol.ADMIN_PROBES_PATH.format(cluster=cluster), bounds)["id"]

    def probe_status(self, cluster: str, probe_id: str) -> dict[str, Any]:
        return self.call("GET", protocol.ADMIN_PROBE_PATH.format(cluster=cluster, probe_id=probe_id))

    def faults(self, **switches: Any) -> dict[str, Any]:
        return self.call("POST" if switches else "GET", protocol.ADMIN_FAULTS_PATH, switches or None)

    def requests_log(self, since: float = 0.0) -> list[dict[str, Any]]:
        return self.call("GET", protocol.ADMIN_REQUESTS_PATH, since=since)["requests"]

    def stats(self) -> dict[str, Any]:
        return self.call("GET", protocol.ADMIN_STATS_PATH)

    def rotate_credential(self, node_id: str) -> dict[str, Any]:
        """Issue the node's next credential; its stream delivers it (the old one holds until used)."""
        return self.call("POST", protocol.ADMIN_NODE_CREDENTIAL_PATH.format(node_id=node_id))

    def expect(self, version: str | None = None, capabilities: list[str] | None = None) -> dict[str, Any]:
        """What `hello` tells the nodes they should run (None: the defaults)."""
        return self.call("POST", protocol.ADMIN_EXPECTATIONS_PATH, {"version": version, "capabilities": capabilities})
