"""`faden-agent doctor`: one line per check (ok / warn / fail) and what to do about it."""

from __future__ import annotations

import email.utils
import http.client
import os
import shutil
import socket
import ssl
import stat
import subprocess
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from faden_agent.cli.doctor_conditions import condition_lines
from faden_agent.cli.doctor_gpus import gpu_lines
from faden_agent.common.errorline import error_line
from faden_agent.config import Config, env_name, listen_host_port
from faden_agent.disk.disklow import consumers, low_threshold
from faden_agent.engine.address import engine_url
from faden_agent.engine.client import EngineClient, image_store
from faden_agent.http.tls import client_context, trust_words
from faden_agent.workers.executor.gpu import GPU_ADVICE, GPU_DRIVER_MISMATCH, GPU_DRIVER_NOT_LOADED, GPU_LOST

if TYPE_CHECKING:
    from faden_agent.node.membership import Membership

OK, WARN, FAIL = "ok", "warn", "fail"
CHECK_TIMEOUT_S = 5.0
CLOCK_WARN_S, CLOCK_FAIL_S = 5.0, 60.0
DISK_FAIL_BYTES = 200 * 2**20


# NVML's answers at start that name a cause of the NVIDIA stack's (workers/executor/gpu.py).
NVML_CAUSES = {18: GPU_DRIVER_MISMATCH, 9: GPU_DRIVER_NOT_LOADED}  # LIB_RM_VERSION_MISMATCH, DRIVER_NOT_LOADED
NVML_ERROR_GPU_IS_LOST = 15


def is_lost(pynvml: Any, index: int) -> bool:
    """The GPU answers NVML with GPU_IS_LOST (fallen off the bus)."""
    try:
        pynvml.nvmlDeviceGetUUID(pynvml.nvmlDeviceGetHandleByIndex(index))
    except pynvml.NVMLError as exc:
        return exc.value == NVML_ERROR_GPU_IS_LOST
    return False


REENROLL = (
    f"the machine was removed or its credential revoked: set a new enrollment token ({env_name('enrollment_token')}"
    " or the token file, or run the console's install line again); the agent re-enrolls as the same agent id,"
    " keeps its containers and the old state file beside (docs/protocol.md, Re-enrollment)"
)
REENROLL_SHARED = (
    "two machines used this node's credential (a copied disk or image) and both are refused: on the real machine"
    f" set a new enrollment token ({env_name('enrollment_token')} or the token file, or run the console's install"
    " line again) and it re-enrolls as the same agent id; on the copy remove the state file before it runs again"
)


@dataclass
class Check:
    name: str
    status: str
    detail: str
    hint: str = ""

    def line(self) -> str:
        text = f"{self.status:<4}  {self.name:<16} {self.detail}"
        return f"{text}\n{'':<22}-> {self.hint}" if self.hint and self.status != OK else text


class Doctor:
    def __init__(self, config: Config, service_paths: Any = None):
        self.config = config
        self.service_paths = service_paths
        self.timeout_s = min(config.request_timeout_sec, CHECK_TIMEOUT_S)
        parts = urlsplit(config.backend_url)
        self.host = parts.hostname or ""
        self.port = parts.port or (443 if parts.scheme == "https" else 80)
        self.https = parts.scheme == "https"
        self.checks: list[Check] = []

    def run(self) -> list[Check]:
        addresses = self.step(self.backend_dns) or []
        connected = self.step(self.backend_tcp, addresses) or False
        self.step(self.backend_tls, connected)
        self.step(self.backend_clock)
        membership = self.step(self.state_file)
        log_target = self.step(self.credential, membership)
        docker_info = self.step(self.docker)
        self.step(self.nvidia_runtime, docker_info)
        self.step(self.nvml)
        self.step(self.gpus)
        self.step(self.journald)
        self.step(self.log_path, log_target)
        self.step(self.disk_state)
        self.step(self.disk_docker, docker_info)
        self.step(self.disk_ray_logs)
        self.step(self.conditions, docker_info)
        self.step(self.service)
        self.step(self.shutdown_inhibitor)
        self.step(self.metrics_endpoint)
        return self.checks

    def step(self, check: Callable[..., Any], *learned_before: Any) -> Any:
        """Run one check with what earlier ones learned; keep its line, return what it learned
        (None when it learned nothing or crashed)."""
        try:
            outcome = check(*learned_before)
        except Exception as exc:  # noqa: BLE001 - a broken check is reported, never fatal
            outcome = Check(check.__name__.replace("_", " "), FAIL, f"check crashed: {exc.__class__.__name__}: {exc}")
        line, learned = outcome if isinstance(outcome, tuple) else (outcome, None)
        if line is not None:
            self.checks.append(line)
        return learned

    # ------------------------------------------------------------------ the backend

    def backend_dns(self) -> tuple[Check, list[tuple]]:
        """The line and the backend's addresses (none when the name does not resolve)."""
        try:
            infos = socket.getaddrinfo(self.host, self.port, type=socket.SOCK_STREAM)
        except socket.gaierror as exc:
            check = Check(
                "backend dns",
                FAIL,
                f"{self.host} does not resolve ({exc.strerror})",
                f"check {env_name('backend_url')} and this machine's DNS (/etc/resolv.conf)",
            )
            return check, []
        addresses = [info[4] for info in infos]
        shown = ", ".join(sorted({str(a[0]) for a in addresses}))
        return Check("backend dns", OK, f"{self.host} -> {shown}"), addresses

    def backend_tcp(self, addresses: list[tuple]) -> tuple[Check, bool]:
        """The line and whether one of the addresses took a TCP connection."""
        if not addresses:
            return Check("backend tcp", FAIL, "skipped: the name does not resolve", "fix DNS first"), False
        errors = []
        for address in addresses:
            start = time.monotonic()
            try:
                with socket.create_connection(address[:2], timeout=self.timeout_s):
                    took_ms = 1000 * (time.monotonic() - start)
                    return Check("backend tcp", OK, f"connected to {address[0]}:{address[1]} in {took_ms:.0f} ms"), True
            except OSError as exc:
                errors.append(f"{address[0]}:{address[1]}: {exc.strerror or exc}")
        proxy = " (an HTTPS proxy is set; the agent uses it, this check does not)" if _proxy_set() else ""
        check = Check(
            "backend tcp",
            FAIL,
            "cannot connect: " + "; ".join(errors) + proxy,
            "is the backend running and reachable from here (firewall, port)?",
        )
        return check, False

    def backend_tls(self, connected: bool) -> Check:
        if not self.https:
            return Check(
                "backend tls",
                WARN,
                f"{self.config.backend_url} is plain http: the credential travels unencrypted",
                "use an https:// backend URL outside a lab",
            )
        if not connected:
            return Check("backend tls", FAIL, "skipped: no TCP connection", "fix the connection first")
        if not self.config.verify_tls:
            return Check("backend tls", WARN, "certificate verification is off", f"set {env_name('verify_tls')}=true")
        context = client_context(self.config.tls_verify())  # what the agent's own connections trust
        trust = trust_words(self.config.tls_verify())
        try:
            with socket.create_connection((self.host, self.port), timeout=self.timeout_s) as raw:
                with context.wrap_socket(raw, server_hostname=self.host) as tls:
                    cert = tls.getpeercert() or {}
                    version = tls.version()
        except ssl.SSLCertVerificationError as exc:
            return Check(
                "backend tls",
                FAIL,
                f"certificate not trusted with {trust}: {exc.verify_message}",
                f"point {env_name('ca_bundle')} at the CA that signed the backend's certificate",
            )
        except (ssl.SSLError, OSError) as exc:
            return Check("backend tls", FAIL, f"TLS handshake failed: {exc}", "is this port serving TLS?")
        until = cert.get("notAfter", "?")
        return Check("backend tls", OK, f"{version}, certificate verified with {trust}, valid until {until}")

    def backend_clock(self) -> Check:
        import requests

        try:
            # stream: only the head is read, whatever body a proxy or a wrong URL sends
            reply = requests.get(
                self.config.backend_url + "/", timeout=self.timeout_s, verify=self.config.tls_verify(), stream=True
            )
        except requests.RequestException as exc:
            return Check(
                "clock skew",
                FAIL,
                f"no HTTP answer from the backend: {error_line(exc, 300, root=True)}",
                "see the backend checks above",
            )
        received = time.time()
        reply.close()
        date = reply.headers.get("Date")
        if not date:
            return Check("clock skew", WARN, "the backend sent no Date header; skew unknown")
        try:
            skew = received - email.utils.parsedate_to_datetime(date).timestamp()
        except (TypeError, ValueError, OverflowError):
            return Check("clock skew", WARN, f"the backend's Date header is no date ({date[:60]!r}); skew unknown")
        text = f"this clock is {abs(skew):.1f}s {'ahead of' if skew > 0 else 'behind'} the backend's"
        if abs(skew) >= CLOCK_FAIL_S:
            return Check(
                "clock skew",
                FAIL,
                text,
                "synchronise the clock (chrony/systemd-timesyncd): TLS and tokens depend on it",
            )
        if abs(skew) >= CLOCK_WARN_S:
            return Check("clock skew", WARN, text, "synchronise the clock (chrony/systemd-timesyncd)")
        return Check("clock skew", OK, text)

    # ------------------------------------------------------------------ membership

    def state_file(self) -> Check | tuple[Check, Membership]:
        """The line, and the membership when the state file holds one for this backend."""
        from faden_agent.node.membership import MembershipError, check_backend, load_membership

        path = self.config.state_path
        try:
            mode = stat.S_IMODE(path.stat().st_mode)
        except FileNotFoundError:
            how = (
                "the configured enrollment token will enroll it"
                if _has_token(self.config)
                else "no enrollment token is configured"
            )
            return Check(
                "state file",
                WARN,
                f"{path} does not exist: not enrolled yet ({how})",
                f"start the agent with {env_name('enrollment_token')} from the console's install line",
            )
        except OSError as exc:
            return Check("state file", FAIL, f"{path}: {exc.strerror}", "fix the permissions of the state directory")
        try:
            membership = load_membership(path)
            if membership is None:  # removed since it was found above
                raise MembershipError(f"{path} disappeared while it was read")
            check_backend(membership, self.config.backend_url, path)
        except MembershipError as exc:
            return Check("state file", FAIL, str(exc))
        if mode != 0o600:  # a failure, yet the credential in it is still worth checking
            hint = f"chmod 600 {path}"
            return Check("state file", FAIL, f"{path} has mode {mode:04o}: it holds the credential", hint), membership
        return Check("state file", OK, f"{path} (0600), node {membership.node_id}"), membership

    def credential(self, membership: Membership | None) -> Check | tuple[Check, dict[str, Any]]:
        """The line, and where the backend sends this node's logs when it accepted the credential."""
        from faden_agent.backend.client import BackendClient, BackendError, CredentialRejected

        if membership is None:
            return Check("credential", WARN, "none yet (not enrolled)", "see the state file check")
        client = BackendClient(self.config, membership.credential, timeout_s=self.timeout_s)
        try:
            log_target = client.log_target()
        except CredentialRejected as exc:
            return Check(
                "credential",
                FAIL,
                f"rejected by the backend (HTTP {exc.status}: {exc.detail or 'no detail'})",
                REENROLL_SHARED if exc.shared_identity else REENROLL,
            )
        except BackendError as exc:
            return Check("credential", FAIL, f"not verified: {exc}", "see the backend checks above")
        finally:
            client.close()
        return Check("credential", OK, f"accepted for node {membership.node_id}"), log_target

    # ------------------------------------------------------------------ Docker and GPUs

    def docker(self) -> Check | tuple[Check, dict[str, Any]]:
        """The line, and the engine's info when it answers."""
        base_url = engine_url(self.config.docker_host)
        try:
            engine = EngineClient(self.config.docker_host, timeout_s=self.timeout_s)
            try:
                info = engine.info()
                versions = engine.engine_version()
            finally:
                engine.close()
        except Exception as exc:  # noqa: BLE001 - any failure: the engine's or the transport's
            return Check(
                "docker",
                FAIL,
                f"engine at {base_url} does not answer: {error_line(exc, 300, root=True)}",
                f"start the Docker engine (systemctl start docker) or fix {env_name('docker_host')}",
            )
        api = (
            f"API {versions.api_in_use} (engine {versions.min_api_version}-{versions.api_version})"
            if versions
            else "API ?"
        )
        text = (
            f"engine {info.get('ServerVersion', '?')} at {base_url}, {api}, {image_store(info)} image store, "
            f"{info.get('Containers', 0)} containers"
        )
        return Check("docker", OK, text), info

    def nvidia_runtime(self, docker_info: dict[str, Any] | None) -> Check:
        if docker_info is None:
            return Check("nvidia runtime", FAIL, "skipped: the engine does not answer", "fix Docker first")
        runtimes = sorted((docker_info.get("Runtimes") or {}).keys())
        if "nvidia" in runtimes or any("nvidia" in str(d) for d in docker_info.get("CDISpecDirs") or []):
            return Check("nvidia runtime", OK, f"runtimes: {', '.join(runtimes)}")
        return Check(
            "nvidia runtime",
            WARN,
            f"no nvidia runtime (runtimes: {', '.join(runtimes) or 'none'}): GPU containers cannot start",
            "install nvidia-container-toolkit and run `nvidia-ctk runtime configure --runtime=docker`",
        )

    def nvml(self) -> Check:
        import pynvml

        try:
            pynvml.nvmlInit()
        except pynvml.NVMLError_LibraryNotFound:
            return Check(
                "nvml",
                WARN,
                "libnvidia-ml not found: no NVIDIA driver on this machine",
                "install the NVIDIA driver if this machine has GPUs",
            )
        except pynvml.NVMLError as exc:
            reason = NVML_CAUSES.get(exc.value)
            if reason:
                return Check("nvml", FAIL, f"NVML does not initialise ({reason}): {exc}", GPU_ADVICE[reason])
            return Check("nvml", FAIL, f"NVML does not initialise: {exc}", "check the driver (nvidia-smi)")
        try:
            count = pynvml.nvmlDeviceGetCount()
            driver = pynvml.nvmlSystemGetDriverVersion()
            lost = [index for index in range(count) if is_lost(pynvml, index)]
        finally:
            pynvml.nvmlShutdown()
        driver_text = driver.decode() if isinstance(driver, bytes) else driver
        if lost:
            which = ", ".join(str(index) for index in lost)
            return Check("nvml", FAIL, f"{GPU_LOST}: GPU {which} of {count} is lost", GPU_ADVICE[GPU_LOST])
        return Check("nvml", OK, f"{count} GPU(s), driver {driver_text}")

    def gpus(self) -> None:
        """One line per GPU and one for the versions (doctor_gpus.py)."""
        for name, status, detail, hint in gpu_lines(self.config, self.timeout_s):
            self.checks.append(Check(name, status, detail, hint))

    # ------------------------------------------------------------------ logs

    def journald(self) -> Check:
        journalctl = shutil.which("journalctl")
        if journalctl is None:
            return Check(
                "journald", WARN, "journalctl not found: system logs are not shipped", "install systemd's journalctl"
            )
        where = ["--directory", str(self.config.journal_directory)] if self.config.journal_directory else []
        try:
            done = subprocess.run(
                [journalctl, *where, "-n", "1", "-q", "--no-pager", "-o", "cat"],
                capture_output=True,
                text=True,
                timeout=self.timeout_s,
            )
        except subprocess.TimeoutExpired:
            return Check("journald", FAIL, f"journalctl did not answer within {self.timeout_s:g}s")
        source = f"directory {self.config.journal_directory}" if where else "the system journal"
        if done.returncode != 0:
            why = done.stderr.strip().splitlines()[-1] if done.stderr.strip() else done.returncode
            return Check(
                "journald",
                FAIL,
                f"cannot read {source}: {why}",
                "run the agent as root or add its user to the systemd-journal group",
            )
        if not done.stdout.strip() and "No journal files" in done.stderr + done.stdout:
            return Check("journald", WARN, f"{source} holds no journal files")
        return Check("journald", OK, f"{source} is readable")

    def log_path(self, target: dict[str, Any] | None) -> Check:
        import requests

        loki = self.config.loki_url or (target.get("url") if target and target.get("mode") == "loki" else None)
        if loki:
            try:
                reply = requests.get(
                    loki + "/ready", timeout=self.timeout_s, verify=self.config.tls_verify(), stream=True
                )
                reply.close()  # the status tells
            except requests.RequestException as exc:
                return Check(
                    "log path",
                    FAIL,
                    f"Loki at {loki} does not answer: {error_line(exc, 300, root=True)}",
                    f"check {env_name('loki_url')} or the backend's log settings",
                )
            if reply.status_code != 200:
                return Check("log path", WARN, f"Loki at {loki} answers HTTP {reply.status_code} on /ready")
            return Check("log path", OK, f"Loki at {loki} is ready")
        if target and target.get("mode") == "push":
            return Check("log path", OK, f"logs go through the backend ({target['path']})")
        return Check(
            "log path",
            WARN,
            "unknown: no Loki URL set and the backend could not be asked",
            f"set {env_name('loki_url')} or fix the credential",
        )

    # ------------------------------------------------------------------ disks and service

    def disk_state(self) -> Check:
        return _disk_check("disk (state)", self.config.state_dir, self.config)

    def disk_ray_logs(self) -> Check:
        return _disk_check("disk (ray logs)", self.config.ray_log_dir, self.config)

    def disk_docker(self, docker_info: dict[str, Any] | None) -> Check | None:
        root = (docker_info or {}).get("DockerRootDir")
        if not root:
            return None
        if not Path(root).exists():
            return Check("disk (docker)", WARN, f"Docker's data root {root} is not visible from here")
        return _disk_check("disk (docker)", Path(root), self.config)

    def conditions(self, docker_info: dict[str, Any] | None) -> None:
        """One line per node condition (doctor_conditions.py)."""
        root = (docker_info or {}).get("DockerRootDir")
        for name, status, detail, hint in condition_lines(self.config, root, self.timeout_s):
            self.checks.append(Check(name, status, detail, hint))

    def shutdown_inhibitor(self) -> Check:
        """Whether logind answers on the system bus (the supervisor's delay inhibitor)."""
        from faden_agent.ipc.dbusconn import Bus, DbusError, system_bus_address
        from faden_agent.supervisor.logind import logind_delay_s

        try:
            bus = Bus(system_bus_address(), min(self.timeout_s, 2.0))
            try:
                delay = logind_delay_s(bus)
            finally:
                bus.close()
        except DbusError as exc:
            return Check(
                "shutdown",
                WARN,
                f"no logind on the system bus ({exc}): a shutdown is not delayed to report it; the agent goes on",
                "normal in a container or on a minimal host; elsewhere check systemd-logind and dbus",
            )
        return Check("shutdown", OK, f"logind answers: a shutdown waits up to {delay:g}s for the agent to report it")

    def service(self) -> Check:
        from faden_agent.service.manager import service_state

        state = service_state(self.service_paths)
        if not state.get("systemd"):
            return Check(
                "service",
                WARN,
                "systemd cannot be asked: the agent is not run as a service here",
                "run `faden-agent start` on a systemd machine, or supervise `faden-agent run` yourself",
            )
        if not state["installed"]:
            return Check("service", WARN, f"no {state['scope']} service installed", "run `faden-agent start`")
        text = (
            f"{state['scope']} service {state['active']} ({state['sub']}), {state['enabled']},"
            f" {state['restarts']} restarts"
        )
        if state["active"] == "active":
            return Check("service", OK, text + f", main pid {state['main_pid']}")
        if state["active"] == "failed":
            return Check("service", FAIL, text, "see `journalctl -u faden-agent` (add --user for a user service)")
        return Check("service", WARN, text, "run `faden-agent start`")

    def metrics_endpoint(self) -> Check:
        """Where the running supervisor serves /metrics and what /readyz says; with no agent
        running, whether the address is free for it."""
        from faden_agent.ipc import Endpoints, request

        name, variable = "metrics", env_name("metrics_addr")
        if self.config.metrics_addr is None:
            return Check(name, OK, f"off ({variable}=off)")
        reply = request(Endpoints(self.config.runtime_dir).control, "ps", timeout_s=1.0)
        table = reply.body if reply is not None and isinstance(reply.body, dict) else None
        if table is None:
            host, port = listen_host_port(self.config.metrics_addr)
            try:
                with socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET) as probe:
                    probe.bind((host, port))
            except OSError as exc:
                return Check(
                    name,
                    WARN,
                    f"agent not running; {self.config.metrics_addr} is taken ({exc.strerror or exc})",
                    f"free it or set {variable} to another address (or off)",
                )
            return Check(name, OK, f"agent not running; {self.config.metrics_addr} is free for it")
        metrics = (table.get("supervisor") or {}).get("metrics") or {}
        if not metrics.get("listening"):
            return Check(name, FAIL, f"not serving: {metrics.get('error')}", f"set {variable} to a free address")
        url = f"http://{metrics['addr']}"
        host, port = listen_host_port(metrics["addr"])
        conn = http.client.HTTPConnection(host, port, timeout=self.timeout_s)  # no proxy: it is this machine
        try:
            conn.request("GET", "/readyz")
            answer = conn.getresponse()
            status, line = answer.status, answer.read(500).decode(errors="replace").strip()
        except OSError as exc:
            return Check(name, FAIL, f"{url}/metrics does not answer ({exc})", "see the agent's log")
        finally:
            conn.close()
        detail = f"serving {url}/metrics; /readyz {status}: {line}"
        return Check(name, OK if status == 200 else WARN, detail, "see the checks above and `faden-agent ps`")


def _disk_check(name: str, path: Path, config: Config) -> Check:
    """FAIL under DISK_FAIL_BYTES; WARN when low as the inventory and disk.low say, naming
    the biggest consumers the agent knows of."""
    probe = path
    while not probe.exists() and probe != probe.parent:
        probe = probe.parent
    usage = shutil.disk_usage(probe)
    text = f"{_gib(usage.free)} free of {_gib(usage.total)} at {path}"
    threshold = low_threshold(usage.total, config)
    if usage.free >= threshold and usage.free >= DISK_FAIL_BYTES:
        return Check(name, OK, text)
    biggest = ", ".join(f"{c['what']} {_gib(c['bytes'])}" for c in consumers(config)) or "unknown"
    text = f"{text}: low (under {_gib(threshold)}); biggest: {biggest}"
    if usage.free < DISK_FAIL_BYTES:
        return Check(name, FAIL, text, "free space now: the agent cannot persist its outbox or state there")
    return Check(name, WARN, text, "free space soon (image.prune removes images no container uses)")


def _gib(value: int) -> str:
    return f"{value / 2**30:.1f} GiB"


def _has_token(config: Config) -> bool:
    return bool(config.enrollment_token or config.enrollment_token_file)


def _proxy_set() -> bool:
    return any(os.environ.get(k) for k in ("HTTPS_PROXY", "https_proxy"))


def report(checks: list[Check]) -> dict[str, Any]:
    worst = FAIL if any(c.status == FAIL for c in checks) else WARN if any(c.status == WARN for c in checks) else OK
    return {"result": worst, "checks": [asdict(c) for c in checks]}
