"""Validation of each command kind's spec: bad input -> one SpecError line naming the key.

`validate(kind, spec)` returns the spec normalised (defaults filled in, sizes in bytes) so
the Docker code never has to second-guess its input. Unknown keys are refused, so a typo
in a backend script is an `invalid_spec` rejection instead of a silently ignored option.
"""

from __future__ import annotations

import re
from typing import Any, Callable

from faden_agent import protocol

NAME_RE = re.compile(r"^[a-zA-Z0-9][a-zA-Z0-9_.-]{0,127}$")
SIZE_RE = re.compile(r"^(\d+)([bkmg]?)$", re.IGNORECASE)
SIZE_UNITS = {"": 1, "b": 1, "k": 1024, "m": 1024**2, "g": 1024**3}
RESTART_POLICIES = ("no", "always", "unless-stopped", "on-failure")
MOUNT_TYPES = ("bind", "volume", "tmpfs")
RESERVED_LABEL_PREFIX = "io.fadenstack."

# Default bounds when neither the envelope nor the spec gives a deadline.
DEFAULT_DEADLINE_S = {"image.pull": 1800.0, "container.run": 900.0}
OTHER_DEADLINE_S = 120.0


class SpecError(ValueError):
    """str() is the one-line message of the invalid_spec rejection."""


def _need(spec: dict, key: str, check: Callable[[Any], Any]) -> Any:
    if key not in spec:
        raise SpecError(f"missing required key {key!r}")
    return check(key, spec[key])


def _str(key: str, value: Any) -> str:
    if not isinstance(value, str) or not value.strip():
        raise SpecError(f"{key!r} must be a non-empty string, got {value!r}")
    return value


def _name(key: str, value: Any) -> str:
    _str(key, value)
    if not NAME_RE.match(value):
        raise SpecError(f"{key!r} {value!r} is not a valid container name ([a-zA-Z0-9][a-zA-Z0-9_.-]*)")
    return value


def _bool(key: str, value: Any) -> bool:
    if not isinstance(value, bool):
        raise SpecError(f"{key!r} must be true or false, got {value!r}")
    return value


def _seconds(key: str, value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0 or value == float("inf"):
        raise SpecError(f"{key!r} must be a positive number of seconds, got {value!r}")
    return float(value)


def _str_list(key: str, value: Any) -> list[str]:
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise SpecError(f"{key!r} must be a list of strings, got {value!r}")
    return value


def _str_map(key: str, value: Any) -> dict[str, str]:
    if not isinstance(value, dict):
        raise SpecError(f"{key!r} must be an object of strings, got {value!r}")
    out = {}
    for k, v in value.items():
        if isinstance(v, bool) or not isinstance(v, (str, int, float)):
            raise SpecError(f"{key!r}[{k!r}] must be a string or number, got {v!r}")
        out[k] = str(v)
    return out


def _size(key: str, value: Any) -> int:
    if isinstance(value, int) and not isinstance(value, bool) and value > 0:
        return value
    match = SIZE_RE.match(value) if isinstance(value, str) else None
    if not match or int(match.group(1)) == 0:
        raise SpecError(f"{key!r} must be a size in bytes or like '8g', '512m', got {value!r}")
    return int(match.group(1)) * SIZE_UNITS[match.group(2).lower()]


def _gpus(key: str, value: Any) -> str | int | list[str]:
    if value == "all":
        return value
    if isinstance(value, int) and not isinstance(value, bool) and value > 0:
        return value
    if isinstance(value, list) and value and all(isinstance(v, (str, int)) and not isinstance(v, bool) for v in value):
        return [str(v) for v in value]
    raise SpecError(f"{key!r} must be \"all\", a positive count, or a list of GPU indexes/UUIDs, got {value!r}")


def _labels(key: str, value: Any) -> dict[str, str]:
    labels = _str_map(key, value)
    for k in labels:
        if k.startswith(RESERVED_LABEL_PREFIX):
            raise SpecError(f"{key!r}: label {k!r} is reserved for the agent")
    return labels


def _ports(key: str, value: Any) -> dict[str, Any]:
    """{"8265/tcp": 8265} or {"8000": ["127.0.0.1", 8000]} or {"6379": null} (random port)."""
    if not isinstance(value, dict):
        raise SpecError(f"{key!r} must be an object like {{\"8265/tcp\": 8265}}, got {value!r}")
    out: dict[str, Any] = {}
    for container_port, host in value.items():
        if not re.match(r"^\d{1,5}(/(tcp|udp|sctp))?$", container_port):
            raise SpecError(f"{key!r}: {container_port!r} is not a container port like '8000' or '8000/tcp'")
        if host is None or (isinstance(host, int) and not isinstance(host, bool) and 0 < host < 65536):
            out[container_port] = host
        elif (isinstance(host, list) and len(host) == 2 and isinstance(host[0], str)
              and isinstance(host[1], int) and 0 < host[1] < 65536):
            out[container_port] = (host[0], host[1])
        else:
            raise SpecError(f"{key!r}[{container_port!r}] must be a host port, [host_ip, port] or null, got {host!r}")
    return out


def _mounts(key: str, value: Any) -> list[dict[str, Any]]:
    if not isinstance(value, list):
        raise SpecError(f"{key!r} must be a list of {{type, source, target, read_only}}, got {value!r}")
    out = []
    for i, mount in enumerate(value):
        if not isinstance(mount, dict):
            raise SpecError(f"{key!r}[{i}] must be an object, got {mount!r}")
        extra = set(mount) - {"type", "source", "target", "read_only"}
        if extra:
            raise SpecError(f"{key!r}[{i}]: unknown keys {sorted(extra)}")
        kind = mount.get("type", "bind")
        if kind not in MOUNT_TYPES:
            raise SpecError(f"{key!r}[{i}].type must be one of {', '.join(MOUNT_TYPES)}, got {kind!r}")
        target = _need(mount, "target", lambda k, v: _str(f"{key}[{i}].{k}", v))
        if not target.startswith("/"):
            raise SpecError(f"{key!r}[{i}].target must be an absolute path, got {target!r}")
        source = mount.get("source")
        if kind != "tmpfs":
            source = _str(f"{key}[{i}].source", source)
            if kind == "bind" and not source.startswith("/"):
                raise SpecError(f"{key!r}[{i}].source of a bind mount must be an absolute path, got {source!r}")
        out.append({"type": kind, "source": source, "target": target,
                    "read_only": _bool(f"{key}[{i}].read_only", mount.get("read_only", False))})
    return out


def _ulimits(key: str, value: Any) -> list[dict[str, Any]]:
    """{"memlock": -1, "nofile": {"soft": 65536, "hard": 65536}}."""
    if not isinstance(value, dict):
        raise SpecError(f"{key!r} must be an object like {{\"nofile\": 65536}}, got {value!r}")
    out = []
    for name, limit in value.items():
        if isinstance(limit, int) and not isinstance(limit, bool):
            out.append({"name": name, "soft": limit, "hard": limit})
        elif isinstance(limit, dict) and set(limit) == {"soft", "hard"} and all(
                isinstance(limit[k], int) and not isinstance(limit[k], bool) for k in limit):
            out.append({"name": name, "soft": limit["soft"], "hard": limit["hard"]})
        else:
            raise SpecError(f"{key!r}[{name!r}] must be a number or {{soft, hard}}, got {limit!r}")
    return out


def _restart_policy(key: str, value: Any) -> dict[str, Any]:
    if isinstance(value, str):
        value = {"name": value}
    if not isinstance(value, dict) or value.get("name") not in RESTART_POLICIES:
        raise SpecError(f"{key!r} must be one of {', '.join(RESTART_POLICIES)} (or {{name, maximum_retry_count}}), got {value!r}")
    policy = {"Name": value["name"]}
    if "maximum_retry_count" in value:
        count = value["maximum_retry_count"]
        if value["name"] != "on-failure" or not isinstance(count, int) or isinstance(count, bool) or count < 0:
            raise SpecError(f"{key!r}.maximum_retry_count needs name on-failure and a count >= 0, got {value!r}")
        policy["MaximumRetryCount"] = count
    return policy


def _healthcheck(key: str, value: Any) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise SpecError(f"{key!r} must be an object with 'test' and optional interval_s, timeout_s, retries, start_period_s")
    extra = set(value) - {"test", "interval_s", "timeout_s", "retries", "start_period_s"}
    if extra:
        raise SpecError(f"{key!r}: unknown keys {sorted(extra)}")
    test = _need(value, "test", lambda k, v: _str_list(f"{key}.{k}", v))
    if not test or test[0] not in ("CMD", "CMD-SHELL", "NONE"):
        raise SpecError(f"{key!r}.test must start with CMD, CMD-SHELL or NONE, got {test!r}")
    out: dict[str, Any] = {"test": test}
    ns = 1_000_000_000
    for field, docker_name in (("interval_s", "interval"), ("timeout_s", "timeout"), ("start_period_s", "start_period")):
        if field in value:
            nanoseconds = _seconds(f"{key}.{field}", value[field]) * ns
            if not 1_000_000 <= nanoseconds < 2**63:  # Docker's bounds: 1 ms, int64 (int(inf) would raise)
                raise SpecError(f"{key!r}.{field} must be from 0.001 s to 9e9 s, got {value[field]!r}")
            out[docker_name] = int(nanoseconds)
    if "retries" in value:
        retries = value["retries"]
        if not isinstance(retries, int) or isinstance(retries, bool) or retries < 1:
            raise SpecError(f"{key!r}.retries must be a positive whole number, got {retries!r}")
        out["retries"] = retries
    return out


def _auth(key: str, value: Any) -> dict[str, str]:
    if not isinstance(value, dict) or not isinstance(value.get("username"), str) or not isinstance(value.get("password"), str):
        raise SpecError(f"{key!r} must be an object with string 'username' and 'password'")  # value never echoed
    return {k: v for k, v in value.items() if k in ("username", "password", "serveraddress")}


def _devices(key: str, value: Any) -> list[str]:
    devices = _str_list(key, value)
    for dev in devices:
        if not dev.startswith("/"):
            raise SpecError(f"{key!r}: {dev!r} must be like /dev/x[:/dev/y[:rwm]]")
    return devices


def _count(key: str, value: Any) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        raise SpecError(f"{key!r} must be a whole number of seconds >= 0, got {value!r}")
    return value


# kind -> (required {key: check}, optional {key: (check, default)})
_COMMON = {"deadline_s": (_seconds, None)}
_TARGET = {"name": _name}
_ADOPT = {"adopt": (_bool, False)}
KINDS: dict[str, tuple[dict[str, Callable], dict[str, tuple[Callable, Any]]]] = {
    "image.pull": ({"image": _str}, {"auth": (_auth, None), **_COMMON}),
    "image.remove": ({"image": _str}, {"force": (_bool, False), **_COMMON}),
    "container.run": (
        {"name": _name, "image": _str},
        {
            "command": (_str_list, None), "entrypoint": (_str_list, None), "env": (_str_map, {}),
            "labels": (_labels, {}), "gpus": (_gpus, None), "ports": (_ports, {}), "mounts": (_mounts, []),
            "network_mode": (_str, None), "ipc_mode": (_str, None), "shm_size": (_size, None),
            "ulimits": (_ulimits, []), "restart_policy": (_restart_policy, None),
            "healthcheck": (_healthcheck, None), "devices": (_devices, []), "cluster": (_str, None),
            "workload": (_str, None), "ray": (_bool, False), "auth": (_auth, None),
            "pull": (lambda k, v: _choice(k, v, ("missing", "always", "never")), "missing"),
            "replace": (_bool, False), "user": (_str, None), "working_dir": (_str, None),
            "privileged": (lambda k, v: _refuse(k, "privileged containers are not run by the agent"), None),
            **_ADOPT, **_COMMON,
        },
    ),
    "container.stop": (_TARGET, {"timeout_s": (_count, 10), **_ADOPT, **_COMMON}),
    "container.start": (_TARGET, {**_ADOPT, **_COMMON}),
    "container.restart": (_TARGET, {"timeout_s": (_count, 10), **_ADOPT, **_COMMON}),
    "container.remove": (_TARGET, {"force": (_bool, True), "volumes": (_bool, False), **_ADOPT, **_COMMON}),
    "command.cancel": ({"command_id": _str}, {}),
}
assert set(KINDS) == set(protocol.COMMAND_KINDS)


def _choice(key: str, value: Any, allowed: tuple[str, ...]) -> str:
    if value not in allowed:
        raise SpecError(f"{key!r} must be one of {', '.join(allowed)}, got {value!r}")
    return value


def _refuse(key: str, why: str) -> None:
    raise SpecError(f"{key!r} is not allowed: {why}")


def validate(kind: str, spec: Any) -> dict[str, Any]:
    """The normalised spec, or SpecError. Callers check the kind is known first."""
    required, optional = KINDS[kind]
    if not isinstance(spec, dict):
        raise SpecError(f"the spec of {kind} must be an object, got {type(spec).__name__}")
    unknown = set(spec) - set(required) - set(optional)
    if unknown:
        raise SpecError(f"unknown keys for {kind}: {', '.join(sorted(unknown))}")
    out: dict[str, Any] = {}
    for key, check in required.items():
        out[key] = _need(spec, key, check)
    for key, (check, default) in optional.items():
        out[key] = check(key, spec[key]) if key in spec and spec[key] is not None else default
    return out


def deadline_for(kind: str, spec: dict[str, Any], envelope_deadline: float | None, received_at: float) -> float:
    """The earliest of the envelope's deadline and the spec's deadline_s; a default otherwise."""
    candidates = []
    if envelope_deadline is not None:
        candidates.append(envelope_deadline)
    if spec.get("deadline_s"):
        candidates.append(received_at + spec["deadline_s"])
    return min(candidates) if candidates else received_at + DEFAULT_DEADLINE_S.get(kind, OTHER_DEADLINE_S)
