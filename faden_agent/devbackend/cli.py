"""`faden-agent dev-backend` and `faden-agent admin ...`: the reference backend and a small
client of its admin API. Heavy imports stay inside the commands; the agent's `run` never
touches them. The admin token comes from --admin-token or FADEN_ADMIN_TOKEN (prefer the
variable: a command line is visible to every local user in `ps`)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson
import typer

ADMIN_TOKEN_ENV = "FADEN_ADMIN_TOKEN"
URL_ENV = "FADEN_NODE_AGENT_BACKEND_URL"

admin_app = typer.Typer(no_args_is_help=True, help="Talk to a reference backend's admin API.")

UrlOption = typer.Option("http://127.0.0.1:8000", "--url", envvar=URL_ENV, help="Backend base URL.")
TokenOption = typer.Option(
    ..., "--admin-token", envvar=ADMIN_TOKEN_ENV, help=f"Admin token (or {ADMIN_TOKEN_ENV}).", show_default=False
)
CaOption = typer.Option(None, "--ca-bundle", help="PEM CA bundle to verify an https backend.")


def _echo_json(data: Any) -> None:
    typer.echo(orjson.dumps(data, option=orjson.OPT_INDENT_2).decode())


def dev_backend(
    host: str = typer.Option("127.0.0.1", "--host", help="Address to listen on."),
    port: int = typer.Option(8000, "--port", help="Port (0: any free port; the first output line says which)."),
    data: Path = typer.Option(Path("./faden-backend-data"), "--data", help="Directory for the SQLite store."),
    admin_token: str = TokenOption,
    downloads: Path | None = typer.Option(
        None, "--downloads", help="Serve this directory's files at /downloads/<file>."
    ),
    loki_url: str | None = typer.Option(
        None, "--loki-url", help="Forward log pushes to this Loki; else keep them (admin .../logs)."
    ),
    loki_tenant: str | None = typer.Option(
        None,
        "--loki-tenant",
        help="Loki tenant (X-Scope-OrgID) for that Loki: named in logs/target, sent when relaying.",
    ),
    keepalive_sec: float = typer.Option(
        15.0, "--keepalive-sec", help="Default stream keepalive when the agent asks for none."
    ),
    tls_cert: Path | None = typer.Option(None, "--tls-cert", help="Serve https with this PEM certificate (chain)."),
    tls_key: Path | None = typer.Option(None, "--tls-key", help="Private key of --tls-cert."),
) -> None:
    import logging

    from faden_agent.common.logsetup import configure_logging
    from faden_agent.devbackend.serve import serve

    configure_logging("info", "faden-dev-backend")
    logging.getLogger("faden_agent.devbackend").setLevel(logging.INFO)
    if not admin_token.strip():
        raise typer.BadParameter(
            "must not be empty: an empty token opens the admin API to anyone", param_hint="--admin-token"
        )
    if downloads is not None and not downloads.is_dir():
        raise typer.BadParameter(f"{downloads} is not a directory", param_hint="--downloads")
    raise typer.Exit(
        serve(
            host,
            port,
            data,
            admin_token,
            downloads=downloads,
            loki_url=loki_url,
            loki_tenant=loki_tenant,
            keepalive_sec=keepalive_sec,
            tls_cert=tls_cert,
            tls_key=tls_key,
        )
    )


def _client(url: str, admin_token: str, ca_bundle: Path | None):
    from faden_agent.devbackend.admin import AdminClient

    return AdminClient(url, admin_token, verify=str(ca_bundle) if ca_bundle else True)


def _run(call):
    from faden_agent.devbackend.admin import AdminError

    try:
        return call()
    except AdminError as exc:
        typer.echo(f"faden-agent admin: {exc}", err=True)
        raise typer.Exit(1) from None


@admin_app.command("token", help="Mint a one-time enrollment token and print it.")
def admin_token_cmd(url: str = UrlOption, admin_token: str = TokenOption, ca_bundle: Path | None = CaOption) -> None:
    typer.echo(_run(lambda: _client(url, admin_token, ca_bundle).mint_token()))


@admin_app.command("nodes", help="List enrolled nodes: id, agent, version, heartbeats, drain state, worker states.")
def admin_nodes(
    url: str = UrlOption,
    admin_token: str = TokenOption,
    ca_bundle: Path | None = CaOption,
    as_json: bool = typer.Option(False, "--json", help="Print JSON."),
) -> None:
    import time

    nodes = _run(lambda: _client(url, admin_token, ca_bundle).nodes())
    if as_json:
        _echo_json(nodes)
        return
    typer.echo(f"{'NODE':<18} {'AGENT':<20} {'VERSION':<9} {'LAST BEAT':>9} {'BEATS':>6} {'DRAIN':<11}  WORKERS")
    for node in nodes:
        age = f"{time.time() - node['last_heartbeat_at']:.0f}s" if node.get("last_heartbeat_at") else "-"
        workers = " ".join(f"{w['name']}={w['state']}" for w in node.get("workers") or [])
        revoked = " (revoked)" if node.get("revoked") else ""
        if node.get("available_version"):
            revoked += f" (agent version {node['available_version']} available)"
        typer.echo(
            f"{node['node_id']:<18} {str(node['agent_id']):<20} {str(node['version']):<9} {age:>9} "
            f"{node['heartbeats']:>6} {str((node.get('drain') or {}).get('state', '-')):<11}  {workers}{revoked}"
        )
        for line in standing_lines(node):
            typer.echo(f"{'':<18} {line}")


def standing_lines(node: dict[str, Any]) -> list[str]:
    """Where a node stands: its labels, its topology in a few words, its conditions not ok."""
    lines = []
    labels = node.get("labels") or {}
    if labels:
        lines.append("labels: " + ",".join(f"{k}={v}" for k, v in sorted(labels.items())))
    topology = node.get("topology") or {}
    if topology.get("gpus") or topology.get("rdma"):
        gpus = [g for g in topology.get("gpus") or [] if isinstance(g, dict)]
        cliques = sorted({str(g["nvlink_clique"]) for g in gpus if g.get("nvlink_clique") is not None})
        words = [f"{len(gpus)} GPUs" + (f" in NVLink clique {','.join(cliques)}" if cliques else "")]
        words.append(f"{len(topology.get('rdma') or [])} RDMA devices")
        if topology.get("ib_subnets"):
            words.append("IB subnet " + ",".join(topology["ib_subnets"]))
        words.append(f"{len(topology.get('gpudirect') or [])} GPUDirect pairs")
        lines.append("topology: " + ", ".join(words))
    for name, state in sorted((node.get("conditions") or {}).items()):
        active = {True: "active", None: "unknown"}.get(state.get("active"), "?")
        lines.append(f"condition {name} {active}: {state.get('reason')}")
    return lines


FollowOption = typer.Option(
    False,
    "--follow",
    "-f",
    help="Show the timeline as it happens (each state, progress "
    "bars, the outcome) until it ends; exit 1 unless it succeeded.",
)
JsonOption = typer.Option(
    False,
    "--json",
    help="Print the command document (JSON); with --follow, once it ended (the view then goes to stderr).",
)


def _show_command(client: Any, command_id: str, follow: bool, as_json: bool) -> None:
    if not follow:
        _echo_json(_run(lambda: client.command(command_id)))
        return
    from rich.console import Console

    from faden_agent.devbackend.follow import follow as follow_timeline

    document = _run(lambda: follow_timeline(client, command_id, Console(stderr=as_json)))
    if as_json:
        _echo_json(document)
    if document["state"] != "succeeded":
        raise typer.Exit(1)


@admin_app.command(
    "send", help="Queue a command for a node and print its id (with --follow, then its timeline as it happens)."
)
def admin_send(
    node_id: str,
    kind: str,
    spec: str = typer.Option("{}", "--spec", help="The command's spec as JSON."),
    command_id: str | None = typer.Option(None, "--id", help="Command id (default: generated)."),
    follow: bool = FollowOption,
    as_json: bool = JsonOption,
    url: str = UrlOption,
    admin_token: str = TokenOption,
    ca_bundle: Path | None = CaOption,
) -> None:
    try:
        spec_value = orjson.loads(spec)
    except orjson.JSONDecodeError as exc:
        raise typer.BadParameter(f"not JSON: {exc}", param_hint="--spec") from None
    client = _client(url, admin_token, ca_bundle)
    sent = _run(lambda: client.send_command(node_id, kind, spec_value, command_id))
    if not (follow and as_json):
        typer.echo(sent)
    if follow:
        _show_command(client, sent, follow, as_json)


@admin_app.command(
    "command", help="Show a command: state and timeline (JSON), or with --follow its timeline as it happens."
)
def admin_command(
    command_id: str,
    follow: bool = FollowOption,
    as_json: bool = JsonOption,
    url: str = UrlOption,
    admin_token: str = TokenOption,
    ca_bundle: Path | None = CaOption,
) -> None:
    _show_command(_client(url, admin_token, ca_bundle), command_id, follow, as_json)


@admin_app.command(
    "show", help="Show a node's events, inventory, heartbeats, timeline records or stored log lines (JSON)."
)
def admin_show(
    node_id: str,
    what: str = typer.Argument(..., help="events, inventory, heartbeats, timeline or logs"),
    url: str = UrlOption,
    admin_token: str = TokenOption,
    ca_bundle: Path | None = CaOption,
) -> None:
    _echo_json(_run(lambda: _client(url, admin_token, ca_bundle).view(node_id, what)))


@admin_app.command(
    "cluster", help="Make exactly these nodes the cluster's machines; their agents are told their peers."
)
def admin_cluster(
    cluster: str,
    node_ids: list[str] = typer.Argument(..., help="The cluster's nodes (all of them)."),
    url: str = UrlOption,
    admin_token: str = TokenOption,
    ca_bundle: Path | None = CaOption,
) -> None:
    _echo_json(_run(lambda: _client(url, admin_token, ca_bundle).set_cluster(cluster, node_ids)))


@admin_app.command(
    "traffic",
    help="The cluster's traffic matrix (machines x machines: rate, RTT, interface), naming the\n"
    "machines whose agent lacks the traffic capability; below it the latest active probes\n"
    "(throughput, RTT p50/p99 or why not), which --probe measures anew.",
)
def admin_traffic(
    cluster: str,
    url: str = UrlOption,
    admin_token: str = TokenOption,
    ca_bundle: Path | None = CaOption,
    as_json: bool = typer.Option(False, "--json", help="Print JSON."),
    probe: bool = typer.Option(False, "--probe", help="Probe every pair of machines first (traffic.probe) and wait."),
    duration: float | None = typer.Option(None, "--duration", help="Probe: seconds per phase (agent default 2)."),
    max_bytes: int | None = typer.Option(None, "--max-bytes", help="Probe: bytes per direction (default 256 MiB)."),
    wait: float = typer.Option(600.0, "--wait", help="Probe: give up waiting after this many seconds."),
) -> None:
    from faden_agent.devbackend.traffic_view import render, wait_for_probes

    client = _client(url, admin_token, ca_bundle)
    if probe:
        probe_id = _run(lambda: client.probe(cluster, duration_s=duration, max_bytes=max_bytes))
        for line in _run(lambda: wait_for_probes(client, cluster, probe_id, wait)):
            typer.echo(line, err=True)
    matrix = _run(lambda: client.traffic(cluster))
    if as_json:
        _echo_json(matrix)
        return
    for line in render(matrix):
        typer.echo(line)


@admin_app.command("revoke", help="Remove a node: its credential is refused (403) from now on.")
def admin_revoke(
    node_id: str, url: str = UrlOption, admin_token: str = TokenOption, ca_bundle: Path | None = CaOption
) -> None:
    _echo_json(_run(lambda: _client(url, admin_token, ca_bundle).revoke(node_id)))


@admin_app.command("faults", help="Switch fault modes for testing; with no option, show them.")
def admin_faults(
    maintenance: int | None = typer.Option(
        None, "--maintenance", help="Answer 503 with this Retry-After (s); -1 ends it."
    ),
    stall: bool | None = typer.Option(None, "--stall/--no-stall", help="Stall streams (headers, then silence)."),
    drop: bool = typer.Option(False, "--drop", help="Drop every open stream now."),
    url: str = UrlOption,
    admin_token: str = TokenOption,
    ca_bundle: Path | None = CaOption,
) -> None:
    switches: dict[str, Any] = {}
    if maintenance is not None:
        switches["maintenance_retry_after"] = None if maintenance < 0 else maintenance
    if stall is not None:
        switches["stall_streams"] = stall
    if drop:
        switches["drop_streams"] = True
    _echo_json(_run(lambda: _client(url, admin_token, ca_bundle).faults(**switches)))
