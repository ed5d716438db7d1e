"""The reference backend's admin API (docs/protocol.md, "Admin API"): enrollment tokens,
nodes, commands, the nodes' records, clusters with their traffic and fan-outs, the request
log. Fault switches: faults.py; image relays: api_relay.py.
"""

from __future__ import annotations

from typing import Any

from faden_agent import protocol
from faden_agent.devbackend.builds import with_available_version
from faden_agent.devbackend.fanout import Fanout
from faden_agent.devbackend.probes import BOUND_KEYS, ProbeRound
from faden_agent.devbackend.web import HttpError, Request, Route, route

RECORD_KIND_OF_VIEW = {"events": protocol.EVENT, "heartbeats": protocol.HEARTBEAT, "timeline": protocol.TIMELINE}


def mint_token(req: Request) -> int:
    req.require_admin()
    return req.send_json(200, {"token": req.backend.store.mint_token()})


def nodes(req: Request) -> int:
    req.require_admin()
    downloads = req.backend.downloads
    return req.send_json(200, {"nodes": [with_available_version(n, downloads) for n in req.backend.store.nodes()]})


def node(req: Request, node_id: str) -> int:
    req.require_admin()
    return req.send_json(200, with_available_version(req.node_or_404(node_id), req.backend.downloads))


def revoke(req: Request, node_id: str) -> int:
    req.require_admin()
    if not req.backend.store.revoke(node_id):
        raise HttpError(404, "not_found", f"no node {node_id}")
    req.backend.faults.drop_generation += 1  # its open stream ends now
    return req.send_json(200, {"node_id": node_id, "revoked": True})


def rotate_credential(req: Request, node_id: str) -> int:
    req.require_admin()
    if not req.backend.store.rotate_credential(node_id):
        raise HttpError(404, "not_found", f"no node {node_id} (or it is revoked)")
    req.backend.faults.drop_generation += 1  # its open stream ends: the next one carries the credential
    return req.send_json(200, {"node_id": node_id, "rotating": True})


def set_expectations(req: Request) -> int:
    """{"version": str | null, "capabilities": [str]}: what `hello` tells every node it should run."""
    req.require_admin()
    body = req.read_json()
    version, capabilities = body.get("version"), body.get("capabilities")
    if version is not None and not isinstance(version, str):
        raise HttpError(400, "bad_body", "'version' must be a string or null")
    if capabilities is not None and (
        not isinstance(capabilities, list) or not all(isinstance(c, str) for c in capabilities)
    ):
        raise HttpError(400, "bad_body", "'capabilities' must be a list of strings or null")
    req.backend.expectations = {"version": version, "capabilities": capabilities}
    req.backend.faults.drop_generation += 1  # the streams reopen with the new hello
    return req.send_json(200, req.backend.expectations)


def send_command(req: Request, node_id: str) -> int:
    req.require_admin()
    req.node_or_404(node_id)
    body = req.read_json()
    kind, spec = body.get("kind"), body.get("spec", {})
    if not isinstance(kind, str) or not kind:
        raise HttpError(400, "bad_body", "a command needs a string 'kind'")
    command_id = body.get("id")
    if command_id is not None and (not isinstance(command_id, str) or not command_id):
        raise HttpError(400, "bad_body", "'id' must be a non-empty string")
    deadline = body.get("deadline")
    if deadline is not None and not isinstance(deadline, (int, float)):
        raise HttpError(400, "bad_body", "'deadline' must be epoch seconds")
    drain = (req.backend.store.node(node_id) or {}).get("drain") or {}
    if (
        kind == "container.run"
        and drain.get("state", protocol.SCHEDULABLE) != protocol.SCHEDULABLE
        and not body.get("force")
    ):
        raise HttpError(
            409,
            "node_cordoned",
            f"node {node_id} is {drain.get('state')}: nothing new is placed there (send force: true)",
        )
    created = req.backend.store.add_command(node_id, kind, spec, command_id, deadline)
    if created["node_id"] != node_id:
        raise HttpError(409, "conflict", f"command id {command_id} belongs to another node")
    req.backend.notify_streams()
    return req.send_json(200, {"id": created["id"], "seq": created["seq"]})


def command(req: Request, command_id: str) -> int:
    req.require_admin()
    found = req.backend.store.command(command_id)
    if found is None:
        raise HttpError(404, "not_found", f"no command {command_id}")
    return req.send_json(200, found)


def node_view(req: Request, node_id: str, view: str) -> int:
    req.require_admin()
    if view not in protocol.ADMIN_NODE_VIEWS:
        raise HttpError(404, "not_found", f"no view {view!r}; one of {', '.join(protocol.ADMIN_NODE_VIEWS)}")
    req.node_or_404(node_id)
    store = req.backend.store
    if view == "inventory":
        return req.send_json(200, store.inventory(node_id))
    if view == "logs":
        return req.send_json(200, {"lines": store.log_lines(node_id)})
    try:
        limit = int(req.query.get("limit", "10000"))
    except ValueError:
        raise HttpError(400, "bad_query", "limit must be an integer") from None
    return req.send_json(200, {view: store.records(node_id, RECORD_KIND_OF_VIEW[view], limit)})


def set_cluster(req: Request, cluster: str) -> int:
    req.require_admin()
    members = req.read_json().get("nodes")
    if not isinstance(members, list) or not all(isinstance(n, str) for n in members):
        raise HttpError(400, "bad_body", "body needs a list of node ids 'nodes'")
    try:
        members = req.backend.store.set_cluster(cluster, members)
    except KeyError as exc:
        raise HttpError(404, "not_found", str(exc.args[0])) from None
    req.backend.cluster_generation += 1
    req.backend.notify_streams()
    return req.send_json(200, {"cluster": cluster, "nodes": members})


def cluster_traffic(req: Request, cluster: str) -> int:
    req.require_admin()
    return req.send_json(200, req.backend.store.traffic_matrix(cluster))


def start_fanout(req: Request, cluster: str) -> int:
    """Put an image on every machine of the cluster, finished machines serving the next."""
    req.require_admin()
    body = req.read_json()
    image_id, image = body.get("image_id"), body.get("image")
    if not isinstance(image_id, str) or not image_id.startswith("sha256:") or not isinstance(image, (str, type(None))):
        raise HttpError(400, "bad_body", "body needs 'image_id' (sha256:...) and optionally 'image' (a reference)")
    if not req.backend.store.members(cluster):
        raise HttpError(404, "not_found", f"no cluster {cluster[:100]}")
    fanout = Fanout(req.backend, cluster, image_id, image).start()
    req.backend.fanouts[fanout.id] = fanout
    return req.send_json(200, {"id": fanout.id})


def cluster_job_status(jobs: dict[str, Any], cluster: str, job_id: str, what: str) -> dict[str, Any]:
    """The status of a background job of the cluster (a fan-out, a probe round); 404 otherwise."""
    job = jobs.get(job_id)
    if job is None or job.cluster != cluster:
        raise HttpError(404, "not_found", f"no {what} {job_id[:40]} in cluster {cluster[:100]}")
    return job.status()


def fanout_status(req: Request, cluster: str, fanout_id: str) -> int:
    req.require_admin()
    return req.send_json(200, cluster_job_status(req.backend.fanouts, cluster, fanout_id, "fan-out"))


def start_probes(req: Request, cluster: str) -> int:
    """Probe every pair of the cluster's machines once (traffic.probe), in rounds of disjoint
    pairs; the results fill the probe matrix of GET .../traffic."""
    req.require_admin()
    body = req.read_json()
    bounds = {key: body.get(key) for key in BOUND_KEYS}
    for key, value in bounds.items():  # the agents check the ranges; here only the types
        if value is not None and (isinstance(value, bool) or not isinstance(value, (int, float))):
            raise HttpError(400, "bad_body", f"{key} must be a number or null")
    if not req.backend.store.members(cluster):
        raise HttpError(404, "not_found", f"no cluster {cluster[:100]}")
    probes = ProbeRound(req.backend, cluster, bounds).start()
    req.backend.probes[probes.id] = probes
    return req.send_json(200, {"id": probes.id})


def probes_status(req: Request, cluster: str, probe_id: str) -> int:
    req.require_admin()
    return req.send_json(200, cluster_job_status(req.backend.probes, cluster, probe_id, "probe round"))


def request_log(req: Request) -> int:
    req.require_admin()
    since = float(req.query.get("since", "0"))
    with req.backend.requests_lock:
        rows = [r for r in req.backend.requests if r["at"] >= since]
    return req.send_json(200, {"requests": rows})


def stats(req: Request) -> int:
    req.require_admin()
    return req.send_json(200, {"records": req.backend.store.count_records()})


ROUTES: list[Route] = [
    route("POST", protocol.ADMIN_ENROLLMENT_TOKENS_PATH, mint_token),
    route("GET", protocol.ADMIN_NODES_PATH, nodes),
    route("GET", protocol.ADMIN_NODE_PATH, node),
    route("DELETE", protocol.ADMIN_NODE_PATH, revoke),
    route("POST", protocol.ADMIN_NODE_COMMANDS_PATH, send_command),
    route("POST", protocol.ADMIN_NODE_CREDENTIAL_PATH, rotate_credential),
    route("POST", protocol.ADMIN_EXPECTATIONS_PATH, set_expectations),
    route("GET", protocol.ADMIN_NODE_VIEW_PATH, node_view),
    route("GET", protocol.ADMIN_COMMAND_PATH, command),
    route("POST", protocol.ADMIN_CLUSTER_PATH, set_cluster),
    route("GET", protocol.ADMIN_CLUSTER_TRAFFIC_PATH, cluster_traffic),
    route("POST", protocol.ADMIN_FANOUTS_PATH, start_fanout),
    route("GET", protocol.ADMIN_FANOUT_PATH, fanout_status),
    route("POST", protocol.ADMIN_PROBES_PATH, start_probes),
    route("GET", protocol.ADMIN_PROBE_PATH, probes_status),
    route("GET", protocol.ADMIN_REQUESTS_PATH, request_log),
    route("GET", protocol.ADMIN_STATS_PATH, stats),
]
