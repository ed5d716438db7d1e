"""The `faden-agent` command: thin; parses, calls, prints. Heavy imports stay inside commands."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any, NoReturn

import orjson
import typer

from faden_agent import __version__
from faden_agent.cli.launch import EXIT_CONFIG, complain
from faden_agent.config import Config, ConfigError, load_config

app = typer.Typer(
    add_completion=False,
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    help="Host-side execution bridge for Fadenstack GPU node clusters.",
)

EXIT_NOT_ALL_RUNNING = 1
EXIT_NO_SUPERVISOR = 3


def fail(message: str, code: int = 1) -> NoReturn:
    raise typer.Exit(complain(message, code))


def load() -> Config:
    try:
        return load_config()
    except ConfigError as exc:
        fail(str(exc), EXIT_CONFIG)


def print_json(data: Any) -> None:
    typer.echo(orjson.dumps(data, option=orjson.OPT_INDENT_2).decode())


def _version_callback(value: bool) -> None:
    if value:
        typer.echo(f"faden-agent {__version__}")
        raise typer.Exit()


@app.callback()
def _root(
    version: bool = typer.Option(
        False, "--version", callback=_version_callback, is_eager=True, help="Print the version."
    ),
) -> None:
    pass


@app.command(help="Run the agent in the foreground: the supervisor and its workers.")
def run() -> None:
    from faden_agent.cli.launch import run_agent

    raise typer.Exit(run_agent())


@app.command(help="Show each worker: state, pid, uptime, restarts, last exit, liveness age, RSS, CPU.")
def ps(as_json: bool = typer.Option(False, "--json", help="Print JSON for machines.")) -> None:
    from faden_agent.ipc import control

    config = load()
    table = control.ps(config.runtime_dir)
    if table is None:
        fail(f"no supervisor answers at {config.runtime_dir} (is the agent running?)", EXIT_NO_SUPERVISOR)
    if as_json:
        print_json(table)
    else:
        typer.echo(format_ps(table))
    # a worker started on demand (the peer worker) and not wanted yet is as it should be
    all_running = all(w["state"] == "RUNNING" or (w.get("status") or {}).get("on_demand") for w in table["workers"])
    raise typer.Exit(0 if all_running else EXIT_NOT_ALL_RUNNING)


def _fmt(value: Any, unit: str = "") -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:.1f}{unit}"
    return f"{value}{unit}"


def alive_age(row: dict[str, Any]) -> Any:
    """Seconds since the worker's last "alive" message; an older supervisor names it heartbeat_age_s."""
    return row["alive_age_s"] if "alive_age_s" in row else row.get("heartbeat_age_s")


def format_ps(table: dict[str, Any]) -> str:
    sup = table["supervisor"]
    lines = [
        f"supervisor pid {sup['pid']}  version {sup.get('version', '?')}  uptime {_fmt(sup.get('uptime_s'), 's')}",
        f"{'WORKER':<10} {'STATE':<9} {'PID':>7} {'UPTIME':>9} {'RESTARTS':>8} {'LAST EXIT':<22} "
        f"{'ALIVE':>7} {'RSS':>8} {'CPU':>6}",
    ]
    for w in table["workers"]:
        rss = f"{w['rss_bytes'] / 2**20:.1f}M" if w.get("rss_bytes") else "-"
        lines.append(
            f"{w['name']:<10} {w['state']:<9} {_fmt(w['pid']):>7} {_fmt(w['uptime_s'], 's'):>9} "
            f"{w['restarts']:>8} {(w.get('last_exit') or '-'):<22} {_fmt(alive_age(w), 's'):>7} "
            f"{rss:>8} {_fmt(w.get('cpu_percent'), '%'):>6}"
        )
    if isinstance(metrics := sup.get("metrics"), dict):
        lines.append(f"metrics    {format_metrics(metrics)}")
    return "\n".join(lines)


def format_metrics(metrics: dict[str, Any]) -> str:
    """The metrics endpoint's line of `ps`: where it serves, or why it does not."""
    if metrics.get("addr") == "off":
        return "off (FADEN_NODE_AGENT_METRICS_ADDR=off)"
    if metrics.get("listening"):
        return f"http://{metrics['addr']}/metrics"
    return f"NOT SERVING: {metrics.get('error')}"


@app.command("config", help="Print the effective configuration, secrets redacted.")
def show_config(as_json: bool = typer.Option(False, "--json", help="Print JSON for machines.")) -> None:
    settings = load().redacted()
    if as_json:
        print_json(settings)
        return
    width = max(len(k) for k in settings)
    for key, value in settings.items():
        shown = "(unset)" if value is None else str(value).lower() if isinstance(value, bool) else value
        typer.echo(f"{key:<{width}}  {shown}")


@app.command(help="Enrolled or not, node id, backend, connection state, last contact, last error (no secrets).")
def status(as_json: bool = typer.Option(False, "--json", help="Print JSON for machines.")) -> None:
    from faden_agent.cli.status import collect_status, format_status
    from faden_agent.service.manager import service_state

    report = collect_status(load_installed())
    report["service"] = service_state()
    if as_json:
        print_json(report)
    else:
        typer.echo(format_status(report))
    raise typer.Exit(0 if report["enrolled"] and report["connection"] == "connected" else 1)


def load_installed() -> Config:
    """The configuration of the installed service (its environment file), the shell's variables on top."""
    from faden_agent.service.envfile import effective_environ
    from faden_agent.service.paths import ServicePaths

    try:
        return load_config(effective_environ(ServicePaths.for_current_user().env_path))
    except ConfigError as exc:
        fail(str(exc), EXIT_CONFIG)


def _service_action(action: Any, *args: Any) -> None:
    from faden_agent.service.manager import ServiceError

    try:
        outcome = action(*args)
    except ServiceError as exc:
        fail(str(exc))
    except OSError as exc:  # e.g. a full disk while writing the unit or the env file: one clear line
        fail(f"cannot write {exc.filename or 'a service file'}: {exc.strerror or exc}; nothing was started")
    for line in outcome.messages:
        typer.echo(line)


@app.command(
    help="Install and start the systemd service with the current FADEN_NODE_AGENT_* settings (repeatable).\n\n"
    "As root a system service, else a user service. The settings go to a 0600 environment file."
)
def start(
    restart_running: bool = typer.Option(
        False, "--restart", help="Restart the service if it already runs (after an upgrade)."
    ),
) -> None:
    from faden_agent.service.manager import install_and_start

    _service_action(lambda: install_and_start(restart_running=restart_running))


@app.command(help="Stop the service (containers keep running).")
def stop() -> None:
    from faden_agent.service.manager import stop as stop_service

    _service_action(stop_service)


@app.command(help="Restart the service (containers keep running).")
def restart() -> None:
    from faden_agent.service.manager import restart as restart_service

    _service_action(restart_service)


@app.command(help="Stop and remove the service and its environment file; the state file stays unless --purge.")
def uninstall(
    purge: bool = typer.Option(False, "--purge", help="Also remove the state (the node's identity)."),
) -> None:
    from faden_agent.service.manager import uninstall as uninstall_service

    _service_action(uninstall_service, purge)


@app.command(help="Check the backend, credential, state, Docker, GPUs, journald, logs, disks and the service.")
def doctor(as_json: bool = typer.Option(False, "--json", help="Print JSON for machines.")) -> None:
    from faden_agent.cli.doctor import FAIL, Doctor, report

    checks = Doctor(load_installed()).run()
    if as_json:
        print_json(report(checks))
    else:
        for check in checks:
            typer.echo(check.line())
    raise typer.Exit(1 if any(c.status == FAIL for c in checks) else 0)


@app.command(
    help="Run in the foreground; with no FADEN_NODE_AGENT_BACKEND_URL, against the embedded reference backend.\n\n"
    "That agent's state and runtime folders are its own (under the data directory), apart from a real install's."
)
def up(
    port: int = typer.Option(8000, "--port", help="Port of the embedded reference backend."),
    data: Path | None = typer.Option(
        None, "--data", help="Its data directory (default: dev-backend/ beside the default state file)."
    ),
    print_env: bool = typer.Option(
        False, "--print-env", help="Print the export lines a second shell needs to reach this agent, then exit."
    ),
) -> None:
    if os.environ.get("FADEN_NODE_AGENT_BACKEND_URL") and not print_env:
        run()
        return
    from faden_agent.devbackend.up import ADMIN_TOKEN_FILE, UpError, admin_token, embedded_backend, up_paths

    data_dir, own = up_paths(data, dict(os.environ))
    if print_env:
        import shlex

        exports = {**own, "FADEN_ADMIN_TOKEN": admin_token(data_dir)}
        for name, value in exports.items():
            typer.echo(f"export {name}={shlex.quote(value)}")
        typer.echo(f"# the admin token is in {data_dir / ADMIN_TOKEN_FILE}")
        return
    os.environ.update(own)
    state_path = load().state_path
    try:
        with embedded_backend(port, data_dir, state_path) as extra_env:
            os.environ.update(extra_env)
            run()
    except UpError as exc:
        fail(str(exc))


def _host_request(action: str, deadline: str | None, wait: str | None, bound: str | None = None, **fields: Any) -> None:
    """`bound`: a check's time limit (the wait's base, sent as time_limit_s)."""
    from faden_agent.cli import hostrequest as hr

    config = load_installed()
    from faden_agent import protocol
    from faden_agent.common.durations import BadDuration, parse_duration

    try:
        bound_s = parse_duration(bound, "--time-limit", protocol.MAX_DRAIN_DEADLINE_S) if bound is not None else None
        deadline_s, wait_s = hr.durations_asked(action, deadline, wait, bound_s)
    except BadDuration as exc:
        fail(str(exc), 2)
    if bound_s is not None:
        fields["time_limit_s"] = bound_s
    if (problem := hr.state_problem(config)) is not None:
        fail(*problem)
    try:
        request_id = hr.send_request(config, action, deadline_s, wait_s, **fields)
    except hr.RequestNotQueued as exc:
        fail(f"{action}: {exc}")
    typer.echo(f"{action}: asked the backend (request {request_id})")
    answer = hr.await_answer(config, request_id, wait_s, typer.echo)
    if answer is None:
        kept = (
            "the request stays queued and is sent when the link is back"
            if action == "cordon"
            else "the request expires unanswered"
        )
        fail(f"{action}: no answer from the backend within {wait_s:g}s; {kept}", hr.EXIT_PENDING)
    code, lines = hr.outcome_lines(answer)
    for line in lines:
        typer.echo(line, err=code != hr.EXIT_DONE)
    raise typer.Exit(code)


WAIT_HELP = "How long to wait for the backend's answer (e.g. 30s, 5m); default 30s, a drain: its deadline + 60s."


@app.command(
    help="Ask the backend to place nothing new on this machine (running containers stay).\n\n"
    "Exit 0 when cordoned, 1 when the backend's answer failed, 3 when not enrolled, 4 when no\n"
    "answer came in time (the request stays queued and is sent when the link is back)."
)
def cordon(wait: str | None = typer.Option(None, "--wait", help=WAIT_HELP)) -> None:
    _host_request("cordon", None, wait)


@app.command(
    help="Ask the backend to drain this machine: cordon it, stop its managed containers (each with its\n"
    "own grace; what still runs at the deadline is stopped hard), ship their last lines, remove them.\n\n"
    "Exit 0 when drained, 1 when it failed (the reason is printed), 3 when not enrolled, 4 when no\n"
    "answer came in time (the request then expires)."
)
def drain(
    deadline: str | None = typer.Option(
        None, "--deadline", help="Bound of the whole drain (e.g. 90s, 5m); default 5m."
    ),
    wait: str | None = typer.Option(None, "--wait", help=WAIT_HELP),
) -> None:
    _host_request("drain", deadline, wait)


@app.command(help="Ask the backend to make this machine schedulable again. Exit codes as `cordon`.")
def uncordon(wait: str | None = typer.Option(None, "--wait", help=WAIT_HELP)) -> None:
    _host_request("uncordon", None, wait)


gpu_app = typer.Typer(
    help="The machine's GPUs, through the backend (docs/commands.md: gpu.forget, gpu.check, gpu.reset)."
)
app.add_typer(gpu_app, name="gpu")


@gpu_app.command(
    "forget",
    help="Acknowledge a GPU removed from this machine for good: it is no longer reported missing\n"
    "(the node's verdict no longer failed for it) and its evidence is dropped. Refused while the\n"
    "GPU is still there. Exit codes as `cordon`.",
)
def gpu_forget(
    uuid: str = typer.Argument(..., help="The uuid of the GPU removed for good (GPU-...), as `missing` lists it."),
    wait: str | None = typer.Option(None, "--wait", help=WAIT_HELP),
) -> None:
    _need_uuid(uuid, "the inventory's gpu.missing names it")
    _host_request("gpu.forget", None, wait, uuid=uuid)


def _need_uuid(uuid: str, where: str) -> None:
    if not uuid.startswith("GPU-") or len(uuid) > 96 or not uuid.isprintable():
        fail(f"{uuid[:60]!r} is no GPU uuid (GPU-...): {where}", 2)


CHECK_TIME_LIMITS_S = {1: 120, 2: 900, 3: 3600, 4: 14400}  # the agent's defaults (commands/gpu.py)


@gpu_app.command(
    "check",
    help="Ask the backend to check this machine's GPUs: DCGM's diagnostic (`dcgmi diag -r LEVEL`)\n"
    "where DCGM is installed, else NVML's own checks. A GPU that runs work is refused unless\n"
    "--allow-busy. Prints each GPU's outcome and every test that did not pass. Exit codes as\n"
    "`cordon`; 1 also when a GPU failed a test (check_failed).",
)
def gpu_check(
    gpu: list[str] = typer.Option([], "--gpu", help="A GPU's uuid (repeat it for more); default: every GPU."),
    level: int = typer.Option(1, "--level", min=1, max=4, help="DCGM's diagnostic level: 1 (seconds) to 4 (hours)."),
    time_limit: str | None = typer.Option(
        None, "--time-limit", help="Bound of the check (e.g. 90s, 30m); default by level: 2m, 15m, 1h, 4h."
    ),
    allow_busy: bool = typer.Option(
        False, "--allow-busy", help="Check GPUs that run work too (a failure there is never read as a fault)."
    ),
    wait: str | None = typer.Option(
        None, "--wait", help="How long to wait for the answer; default the time limit + 60s."
    ),
) -> None:
    for uuid in gpu:
        _need_uuid(uuid, "the inventory's gpu.devices[].uuid names them")
    if time_limit is None:
        time_limit = f"{CHECK_TIME_LIMITS_S[level]}s"
    fields: dict[str, Any] = {"level": level, "allow_busy": allow_busy}
    if gpu:
        fields["gpus"] = gpu
    _host_request("gpu.check", None, wait, time_limit, **fields)


@gpu_app.command(
    "reset",
    help="Ask the backend to reset one GPU (`nvidia-smi --gpu-reset`) and check it after; the other\n"
    "GPUs keep serving. Refused while containers use it, unless --stop-containers (each stopped with\n"
    "its grace, its last lines shipped; the backend decides whether to start them again). Exit\n"
    "codes as `cordon`; 1 with the reason (gpu_in_use, reset_blocked, reset_failed, ...) and the next remedy.",
)
def gpu_reset(
    uuid: str = typer.Argument(..., help="The uuid of the GPU to reset (GPU-...)."),
    stop_containers: bool = typer.Option(
        False, "--stop-containers", help="Stop the containers using this GPU first (only those; not restarted after)."
    ),
    deadline: str | None = typer.Option(None, "--deadline", help="Bound of the whole reset (e.g. 5m); default 10m."),
    wait: str | None = typer.Option(
        None, "--wait", help="How long to wait for the answer; default the deadline + 60s."
    ),
) -> None:
    _need_uuid(uuid, "the inventory's gpu.devices[].uuid names it")
    _host_request("gpu.reset", deadline, wait, uuid=uuid, stop_containers=stop_containers)


# The reference backend and its admin client (faden_agent/devbackend; typer only at import).
from faden_agent.devbackend.cli import admin_app, dev_backend  # noqa: E402

app.command("dev-backend", help="Run the reference backend (docs/protocol.md) in the foreground.")(dev_backend)
app.add_typer(admin_app, name="admin")


def main() -> None:
    try:
        app()
    except KeyboardInterrupt:
        sys.exit(130)
