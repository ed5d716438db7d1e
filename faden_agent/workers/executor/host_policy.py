"""The host's say over what the backend may run (FADEN_NODE_AGENT_POLICY_FILE, docs/commands.md).

Owns the defaults (fit for Ray and vLLM) and the check of a validated container spec: bind
sources resolved (symlinks, `..`) before they are compared; a refusal names its rule. A
policy file that cannot be used refuses every container it would have judged.
"""

from __future__ import annotations

import fnmatch
import os
import stat
from dataclasses import dataclass, field
from typing import Any

import orjson

from faden_agent.config import Config, env_name
from faden_agent.protocol import quote

MAX_POLICY_BYTES = 64 * 1024
DOCKER_SOCKETS = ("/var/run/docker.sock", "/run/docker.sock")
PROTECTED_PATHS = ("/", "/etc", "/root", "/boot", "/proc", "/sys", "/var/lib/docker", *DOCKER_SOCKETS)
ALLOW_BIND = ("/root/.cache/huggingface",)  # the model cache of a root-run vLLM or Ray
CAPABILITIES = ("IPC_LOCK", "SYS_NICE", "SYS_PTRACE")  # pinned memory (RDMA), scheduling, py-spy
DEVICES = ("/dev/nvidia*", "/dev/infiniband/*", "/dev/dri/*", "/dev/kfd")
SWITCHES = {"privileged": False, "host_network": True, "host_ipc": True, "gpus": True}
LISTS = ("protected_paths", "allow_bind", "capabilities", "devices")


class PolicyDenied(ValueError):
    """str() is the one-line message of the `rejected` / `policy_denied` outcome."""

    reason = "policy_denied"


class PolicyFileError(ValueError):
    """A policy file that cannot be used; str() names the file."""


@dataclass(frozen=True)
class HostPolicy:
    protected_paths: tuple[str, ...] = PROTECTED_PATHS
    allow_bind: tuple[str, ...] = ALLOW_BIND
    capabilities: tuple[str, ...] = CAPABILITIES
    devices: tuple[str, ...] = DEVICES
    switches: dict[str, bool] = field(default_factory=lambda: dict(SWITCHES))
    broken: str | None = None  # why the policy file is unusable: every container is refused

    def admit(self, spec: dict[str, Any]) -> None:
        """Raise PolicyDenied naming the rule a validated container spec breaks."""
        if self.broken is not None:
            raise PolicyDenied(f"rule policy_file: {self.broken}; no container is run until it is fixed")
        self._switch("privileged", bool(spec.get("privileged")), "privileged: true")
        self._switch("host_network", spec.get("network_mode") == "host", "network_mode host")
        self._switch("host_ipc", spec.get("ipc_mode") == "host", "ipc_mode host")
        self._switch("gpus", spec.get("gpus") is not None, "gpus")
        for cap in spec.get("cap_add") or ():
            name = cap.upper().removeprefix("CAP_")
            if name not in self.capabilities:
                raise PolicyDenied(
                    f"rule capabilities: cap_add {quote(cap)} is not among the allowed {', '.join(self.capabilities)}"
                )
        for i, device in enumerate(spec.get("devices") or ()):
            host = os.path.realpath(device.split(":", 1)[0])
            if not any(fnmatch.fnmatchcase(host, pattern) for pattern in self.devices):
                raise PolicyDenied(
                    f"rule devices: devices[{i}] {quote(device)} (resolved {host}) matches none of "
                    f"{', '.join(self.devices)}"
                )
        for i, mount in enumerate(spec.get("mounts") or ()):
            if mount.get("type") == "bind":
                self._bind(i, mount["source"])

    def _switch(self, rule: str, asked: bool, what: str) -> None:
        if asked and not self.switches[rule]:
            raise PolicyDenied(f"rule {rule}: {what} is not allowed on this host")

    def _bind(self, i: int, source: str) -> None:
        resolved = os.path.realpath(source)
        if any(_within(resolved, os.path.realpath(allowed)) for allowed in self.allow_bind):
            return
        for protected in self.protected_paths:
            path = os.path.realpath(protected)
            if resolved == path or (path != "/" and _within(resolved, path)):
                relation = "is" if resolved == path else "is inside"
            elif _within(path, resolved):
                relation = "holds"
            else:
                continue
            raise PolicyDenied(
                f"rule protected_paths: mounts[{i}].source {quote(source)} (resolved {resolved}) {relation} "
                f"the protected path {path}"
            )


def _within(path: str, parent: str) -> bool:
    return path == parent or path.startswith(parent.rstrip("/") + "/")


def load_policy(config: Config) -> HostPolicy:
    """The host policy: defaults, widened or narrowed by the policy file; PolicyFileError
    (one line naming the file) when the file cannot be used."""
    # the agent's own directories, and the files that may hold its token
    own = tuple(
        str(p) for p in (config.state_dir, config.runtime_dir, config.env_file, config.enrollment_token_file) if p
    )
    path = config.policy_file
    if path is None:
        return HostPolicy(protected_paths=PROTECTED_PATHS + own)
    where = f"{env_name('policy_file')}={path}"
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)  # a FIFO must not block
    except OSError as exc:
        raise PolicyFileError(f"{where}: cannot be read: {exc.strerror or exc}") from None
    with os.fdopen(fd, "rb") as f:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise PolicyFileError(f"{where}: not a regular file")
        raw = f.read(MAX_POLICY_BYTES + 1)
    if len(raw) > MAX_POLICY_BYTES:
        raise PolicyFileError(f"{where}: larger than {MAX_POLICY_BYTES} bytes")
    try:
        data = orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        raise PolicyFileError(f"{where}: not JSON: {exc}") from None
    if not isinstance(data, dict):
        raise PolicyFileError(f"{where}: must be a JSON object, got {type(data).__name__}")
    unknown = set(data) - set(SWITCHES) - set(LISTS)
    if unknown:
        known = ", ".join([*SWITCHES, *LISTS])
        raise PolicyFileError(f"{where}: unknown keys {quote(sorted(unknown))}; known: {known}")
    switches = dict(SWITCHES)
    for key in SWITCHES.keys() & data.keys():
        if not isinstance(data[key], bool):
            raise PolicyFileError(f"{where}: {key} must be true or false, got {quote(data[key])}")
        switches[key] = data[key]
    lists: dict[str, tuple[str, ...]] = {}
    for key in LISTS:
        value = data.get(key)
        if value is not None and (not isinstance(value, list) or not all(isinstance(v, str) and v for v in value)):
            raise PolicyFileError(f"{where}: {key} must be a list of non-empty strings, got {quote(value)}")
        if value is not None and key in ("protected_paths", "allow_bind", "devices"):
            relative = [v for v in value if not v.startswith("/")]
            if relative:
                raise PolicyFileError(f"{where}: {key} takes absolute paths, got {quote(relative[0])}")
        lists[key] = tuple(value) if value is not None else ()
    return HostPolicy(
        # protected paths are only ever added to: the built-in ones stay, allow_bind makes exceptions
        protected_paths=PROTECTED_PATHS + own + lists["protected_paths"],
        allow_bind=lists["allow_bind"] if "allow_bind" in data else ALLOW_BIND,
        capabilities=tuple(c.upper().removeprefix("CAP_") for c in lists["capabilities"])
        if "capabilities" in data
        else CAPABILITIES,
        devices=lists["devices"] if "devices" in data else DEVICES,
        switches=switches,
    )


def policy_or_refusal(config: Config) -> HostPolicy:
    """load_policy, or a policy that refuses every container with the file's problem."""
    try:
        return load_policy(config)
    except PolicyFileError as exc:
        return HostPolicy(broken=str(exc))


def policy_path_problem(config: Config) -> str | None:
    """The one-line problem of the configured policy file, None when it is usable (for start-up)."""
    try:
        load_policy(config)
    except PolicyFileError as exc:
        return str(exc)
    return None
