"""The host's say over what the backend may run (FADEN_NODE_AGENT_POLICY_FILE, docs/commands.md).

Owns the defaults (fit for Ray and vLLM) and the check of a validated container spec: bind
sources only inside an allowed directory, none a tenant could swap (bind_paths.py), the
resolved spec returned for Docker; a refusal (any error of the check too) names its rule.
"""

from __future__ import annotations

import fnmatch
import os
import stat
from collections.abc import Mapping, Sequence
from types import MappingProxyType
from typing import Any, NamedTuple

import orjson

from faden_agent.config import Config, env_name
from faden_agent.protocol import quote
from faden_agent.workers.executor.bind_paths import SHM, Bind, PathRefused, check_holds, walk, within

MAX_POLICY_BYTES = 64 * 1024
DOCKER_SOCKETS = ("/var/run/docker.sock", "/run/docker.sock")
PROTECTED_PATHS = ("/", "/etc", "/root", "/boot", "/proc", "/sys", "/var/lib/docker", *DOCKER_SOCKETS)
# Besides the agent's own Ray log directory: the model cache of a root-run vLLM or Ray, and
# the shared memory NCCL and Ray's object store use. Nothing else by default (docs/commands.md).
ALLOW_BIND = ("/root/.cache/huggingface", "/dev/shm")
CAPABILITIES = ("IPC_LOCK", "SYS_NICE", "SYS_PTRACE")  # pinned memory (RDMA), scheduling, py-spy
DEVICES = ("/dev/nvidia*", "/dev/infiniband/*", "/dev/dri/*", "/dev/kfd")
SWITCHES = {"privileged": False, "host_network": True, "host_ipc": True, "gpus": True}
LISTS = ("protected_paths", "allow_bind", "capabilities", "devices")


class PolicyDenied(ValueError):
    """str() is the one-line message of the `rejected` / `policy_denied` outcome."""

    reason = "policy_denied"


class PolicyFileError(ValueError):
    """A policy file that cannot be used; str() names the file."""


class HostPolicy(NamedTuple):
    protected_paths: tuple[str, ...] = PROTECTED_PATHS
    allow_bind: tuple[str, ...] = ALLOW_BIND
    own_bind: tuple[str, ...] = ()  # the agent's Ray log directory: always allowed
    capabilities: tuple[str, ...] = CAPABILITIES
    devices: tuple[str, ...] = DEVICES
    switches: Mapping[str, bool] = MappingProxyType(dict(SWITCHES))  # read only: shared by the defaults
    broken: str | None = None  # why the policy file is unusable: every container is refused

    def admit(self, spec: dict[str, Any], binds: Sequence[Bind] | None = None) -> dict[str, Any]:
        """The spec with each bind source replaced by its resolved path, for Docker; raise
        PolicyDenied naming the rule it breaks (or why it could not be judged). `binds`: what
        the engine's containers mount (None when not asked: judged again before create)."""
        try:
            return self._admit(spec, binds)
        except PolicyDenied:
            raise
        except PathRefused as exc:
            raise PolicyDenied(f"rule {exc.rule}: {exc}") from None
        except Exception as exc:  # noqa: BLE001 - a check that cannot finish admits nothing
            raise PolicyDenied(f"rule check: the spec cannot be judged: {type(exc).__name__}: {exc}") from None

    def _admit(self, spec: dict[str, Any], binds: Sequence[Bind] | None) -> dict[str, Any]:
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
        mounts = list(spec.get("mounts") or ())
        resolved = self._bind_sources(spec, mounts, binds)
        out = [{**m, "source": resolved[i]} if i in resolved else m for i, m in enumerate(mounts)]
        return {**spec, "mounts": out} if "mounts" in spec else dict(spec)

    def _bind_sources(
        self, spec: dict[str, Any], mounts: list[dict[str, Any]], binds: Sequence[Bind] | None
    ) -> dict[int, str]:
        """Each bind mount's resolved source, by index. Walked once to resolve them, then
        again with the spec's own writable sources beside the engine's containers' (so one
        of its binds inside another is refused too), and none may hold another's source."""
        name = str(spec.get("name") or "being judged")
        own = {i: m for i, m in enumerate(mounts) if m.get("type") == "bind"}
        writable = None if binds is None else [b for b in binds if b.writable]
        first = {i: self._bind(i, m["source"], writable) for i, m in own.items()}
        if binds is None:
            return first
        mine = [(_where(i, m["source"]), Bind(name, first[i], not m.get("read_only"))) for i, m in own.items()]
        if spec.get("ipc_mode") == "host":
            mine.append(("ipc_mode host", Bind(name, SHM, True)))
        writable = [*(writable or ()), *(b for _, b in mine if b.writable)]
        resolved = {i: self._bind(i, m["source"], writable) for i, m in own.items()}
        check_holds(mine, binds)
        return resolved

    def _switch(self, rule: str, asked: bool, what: str) -> None:
        if asked and not self.switches[rule]:
            raise PolicyDenied(f"rule {rule}: {what} is not allowed on this host")

    def _bind(self, i: int, source: str, writable: Sequence[Bind] | None) -> str:
        """The resolved source of mounts[i]; PolicyDenied unless it is inside an allowed
        directory and no one but root can swap it."""
        where = _where(i, source)
        allowed = [os.path.realpath(a) for a in (*self.own_bind, *self.allow_bind)]
        try:
            resolved = walk(source, allowed, writable, where)
        except PathRefused as refused:
            outside = _outside(source, allowed)
            if refused.rule == "allow_bind" or outside is None:
                raise
            resolved = outside
        inside = [a for a in allowed if within(resolved, a)]
        if not inside:
            raise PolicyDenied(
                f"rule allow_bind: {where} (resolved {resolved}) is inside none of the allowed directories "
                f"{', '.join(allowed) or '(none)'}; the host's policy file may name it"
            )
        nearest = max(inside, key=len)
        for protected in self.protected_paths:
            path = os.path.realpath(protected)
            if within(nearest, path):
                continue  # an allowed directory at or inside a protected one is that exception
            if resolved == path or (path != "/" and within(resolved, path)):
                relation = "is" if resolved == path else "is inside"
            elif within(path, resolved):
                relation = "holds"
            else:
                continue
            raise PolicyDenied(
                f"rule protected_paths: {where} (resolved {resolved}) {relation} the protected path {path}"
            )
        return resolved


def _outside(source: str, allowed: list[str]) -> str | None:
    """The real path of a source named and resolved outside every allowed directory (that
    is its refusal, before any other), else None."""
    try:
        resolved = os.path.realpath(source)
    except OSError:
        return None
    named = (os.path.normpath(source), resolved)
    return None if any(within(path, a) for path in named for a in allowed) else resolved


def _where(i: int, source: str) -> str:
    return f"mounts[{i}].source {quote(source)}"


def load_policy(config: Config) -> HostPolicy:
    """The host policy: defaults, widened or narrowed by the policy file; PolicyFileError
    (one line naming the file) when the file cannot be used."""
    # the agent's own directories, and the files that may hold its token
    own = tuple(
        str(p) for p in (config.state_dir, config.runtime_dir, config.env_file, config.enrollment_token_file) if p
    )
    ray = (str(config.ray_log_dir),) if config.ray_log_dir else ()
    path = config.policy_file
    if path is None:
        return HostPolicy(protected_paths=PROTECTED_PATHS + own, own_bind=ray)
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
        own_bind=ray,
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
