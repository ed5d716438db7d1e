"""The checks of spec keys: bad input -> one SpecError line naming the key, quoting at most
protocol.QUOTE_BYTES of the value. Which keys each kind takes is in its family module, commands/<family>.py.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from typing import Any

from faden_agent.common import durations
from faden_agent.protocol import quote

NAME_RE = re.compile(r"^[a-zA-Z0-9][a-zA-Z0-9_.-]{0,127}$")
SIZE_RE = re.compile(r"^(\d{1,19})([bkmg]?)$", re.IGNORECASE)  # bounded: int() of 5000 digits raises
SIZE_UNITS = {"": 1, "b": 1, "k": 1024, "m": 1024**2, "g": 1024**3}
RESTART_POLICIES = ("no", "always", "unless-stopped", "on-failure")
MOUNT_TYPES = ("bind", "volume", "tmpfs")
RESERVED_LABEL_PREFIX = "io.fadenstack."

MAX_INT64 = 2**63 - 1  # what Docker's API (Go int64) and SQLite take
Check = Callable[[str, Any], Any]


class SpecError(ValueError):
    """str() is the one-line message of the invalid_spec rejection."""


def _need(spec: dict, key: str, check: Check) -> Any:
    if key not in spec:
        raise SpecError(f"missing required key {quote(key)}")
    return check(key, spec[key])


def string_under(at: str) -> Check:
    """string() for a key inside `at` (a list item's field), named with its path."""
    return lambda key, value: string(f"{at}.{key}", value)


def string(key: str, value: Any) -> str:
    if not isinstance(value, str) or not value.strip():
        raise SpecError(f"{quote(key)} must be a non-empty string, got {quote(value)}")
    return value


def name(key: str, value: Any) -> str:
    string(key, value)
    if not NAME_RE.fullmatch(value):
        raise SpecError(f"{quote(key)} {quote(value)} is not a valid container name ([a-zA-Z0-9][a-zA-Z0-9_.-]*)")
    return value


def boolean(key: str, value: Any) -> bool:
    if not isinstance(value, bool):
        raise SpecError(f"{quote(key)} must be true or false, got {quote(value)}")
    return value


def seconds(key: str, value: Any) -> float:
    try:
        return durations.seconds(value, quote(key))
    except durations.BadDuration as exc:
        raise SpecError(str(exc)) from None


def str_list(key: str, value: Any) -> list[str]:
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise SpecError(f"{quote(key)} must be a list of strings, got {quote(value)}")
    return value


def str_map(key: str, value: Any) -> dict[str, str]:
    if not isinstance(value, dict):
        raise SpecError(f"{quote(key)} must be an object of strings, got {quote(value)}")
    out = {}
    for k, v in value.items():
        if isinstance(v, bool) or not isinstance(v, (str, int, float)):
            raise SpecError(f"{quote(key)}[{quote(k)}] must be a string or number, got {quote(v)}")
        out[k] = str(v)
    return out


def size(key: str, value: Any) -> int:
    if _int64(value) and value > 0:
        return value
    match = SIZE_RE.fullmatch(value) if isinstance(value, str) else None
    size = int(match.group(1)) * SIZE_UNITS[match.group(2).lower()] if match else 0
    if not 0 < size <= MAX_INT64:
        raise SpecError(f"{quote(key)} must be a size in bytes or like '8g', '512m', got {quote(value)}")
    return size


def gpus(key: str, value: Any) -> str | int | list[str]:
    if value == "all":
        return value
    if _int64(value) and value > 0:
        return value
    if isinstance(value, list) and value and all(isinstance(v, (str, int)) and not isinstance(v, bool) for v in value):
        return [str(v) for v in value]
    raise SpecError(f'{quote(key)} must be "all", a positive count, or a list of GPU indexes/UUIDs, got {quote(value)}')


def labels(key: str, value: Any) -> dict[str, str]:
    labels = str_map(key, value)
    for k in labels:
        if k.startswith(RESERVED_LABEL_PREFIX):
            raise SpecError(f"{quote(key)}: label {quote(k)} is reserved for the agent")
    return labels


def ports(key: str, value: Any) -> dict[str, Any]:
    """{"8265/tcp": 8265} or {"8000": ["127.0.0.1", 8000]} or {"6379": null} (random port)."""
    if not isinstance(value, dict):
        raise SpecError(f'{quote(key)} must be an object like {{"8265/tcp": 8265}}, got {quote(value)}')
    out: dict[str, Any] = {}
    for container_port, host in value.items():
        if not re.fullmatch(r"\d{1,5}(/(tcp|udp|sctp))?", container_port):
            raise SpecError(f"{quote(key)}: {quote(container_port)} is not a container port like '8000' or '8000/tcp'")
        if host is None or (isinstance(host, int) and not isinstance(host, bool) and 0 < host < 65536):
            out[container_port] = host
        elif (
            isinstance(host, list)
            and len(host) == 2
            and isinstance(host[0], str)
            and isinstance(host[1], int)
            and 0 < host[1] < 65536
        ):
            out[container_port] = (host[0], host[1])
        else:
            raise SpecError(
                f"{quote(key)}[{quote(container_port)}] must be a host port, [host_ip, port] or null, got {quote(host)}"
            )
    return out


def port(key: str, value: Any) -> int:
    if not _int64(value) or not 0 < value < 65536:
        raise SpecError(f"{quote(key)} must be a port from 1 to 65535, got {quote(value)}")
    return value


def url_path(key: str, value: Any) -> str:
    string(key, value)
    if not value.startswith("/") or len(value) > 256 or any(c.isspace() or ord(c) < 32 for c in value):
        raise SpecError(f"{quote(key)} must be a URL path like '/metrics' (at most 256 characters), got {quote(value)}")
    return value


def mounts(key: str, value: Any) -> list[dict[str, Any]]:
    if not isinstance(value, list):
        raise SpecError(f"{quote(key)} must be a list of {{type, source, target, read_only}}, got {quote(value)}")
    out = []
    for i, mount in enumerate(value):
        if not isinstance(mount, dict):
            raise SpecError(f"{quote(key)}[{i}] must be an object, got {quote(mount)}")
        extra = set(mount) - {"type", "source", "target", "read_only"}
        if extra:
            raise SpecError(f"{quote(key)}[{i}]: unknown keys {quote(sorted(extra))}")
        kind = mount.get("type", "bind")
        if kind not in MOUNT_TYPES:
            raise SpecError(f"{quote(key)}[{i}].type must be one of {', '.join(MOUNT_TYPES)}, got {quote(kind)}")
        at = f"{key}[{i}]"
        target = _need(mount, "target", string_under(at))
        if not target.startswith("/"):
            raise SpecError(f"{quote(key)}[{i}].target must be an absolute path, got {quote(target)}")
        source = mount.get("source")
        if kind != "tmpfs":
            source = string(f"{key}[{i}].source", source)
            if kind == "bind" and not source.startswith("/"):
                raise SpecError(
                    f"{quote(key)}[{i}].source of a bind mount must be an absolute path, got {quote(source)}"
                )
        out.append(
            {
                "type": kind,
                "source": source,
                "target": target,
                "read_only": boolean(f"{key}[{i}].read_only", mount.get("read_only", False)),
            }
        )
    return out


def ulimits(key: str, value: Any) -> list[dict[str, Any]]:
    """{"memlock": -1, "nofile": {"soft": 65536, "hard": 65536}}."""
    if not isinstance(value, dict):
        raise SpecError(f'{quote(key)} must be an object like {{"nofile": 65536}}, got {quote(value)}')
    out = []
    for name, limit in value.items():
        if _int64(limit):
            out.append({"name": name, "soft": limit, "hard": limit})
        elif isinstance(limit, dict) and set(limit) == {"soft", "hard"} and all(_int64(limit[k]) for k in limit):
            out.append({"name": name, "soft": limit["soft"], "hard": limit["hard"]})
        else:
            raise SpecError(f"{quote(key)}[{quote(name)}] must be a number or {{soft, hard}}, got {quote(limit)}")
    return out


def restart_policy(key: str, value: Any) -> dict[str, Any]:
    if isinstance(value, str):
        value = {"name": value}
    if not isinstance(value, dict) or value.get("name") not in RESTART_POLICIES:
        raise SpecError(
            f"{quote(key)} must be one of {', '.join(RESTART_POLICIES)} (or {{name, maximum_retry_count}}),"
            f" got {quote(value)}"
        )
    policy = {"Name": value["name"]}
    if "maximum_retry_count" in value:
        count = value["maximum_retry_count"]
        if value["name"] != "on-failure" or not _int64(count) or count < 0:
            raise SpecError(
                f"{quote(key)}.maximum_retry_count needs name on-failure and a count >= 0, got {quote(value)}"
            )
        policy["MaximumRetryCount"] = count
    return policy


def healthcheck(key: str, value: Any) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise SpecError(
            f"{quote(key)} must be an object with 'test' and optional interval_s, timeout_s, retries, start_period_s"
        )
    extra = set(value) - {"test", "interval_s", "timeout_s", "retries", "start_period_s"}
    if extra:
        raise SpecError(f"{quote(key)}: unknown keys {quote(sorted(extra))}")
    test = _need(value, "test", lambda k, v: str_list(f"{key}.{k}", v))
    if not test or test[0] not in ("CMD", "CMD-SHELL", "NONE"):
        raise SpecError(f"{quote(key)}.test must start with CMD, CMD-SHELL or NONE, got {quote(test)}")
    out: dict[str, Any] = {"test": test}
    ns = 1_000_000_000
    for field, docker_name in (
        ("interval_s", "interval"),
        ("timeout_s", "timeout"),
        ("start_period_s", "start_period"),
    ):
        if field in value:
            nanoseconds = seconds(f"{key}.{field}", value[field]) * ns
            if not 1_000_000 <= nanoseconds < 2**63:  # Docker's bounds: 1 ms, int64 (int(inf) would raise)
                raise SpecError(f"{quote(key)}.{field} must be from 0.001 s to 9e9 s, got {quote(value[field])}")
            out[docker_name] = int(nanoseconds)
    if "retries" in value:
        retries = value["retries"]
        if not _int64(retries) or retries < 1:
            raise SpecError(f"{quote(key)}.retries must be a positive whole number, got {quote(retries)}")
        out["retries"] = retries
    return out


def auth(key: str, value: Any) -> dict[str, str]:
    if (
        not isinstance(value, dict)
        or not isinstance(value.get("username"), str)
        or not isinstance(value.get("password"), str)
    ):
        raise SpecError(f"{quote(key)} must be an object with string 'username' and 'password'")  # value never echoed
    return {k: v for k, v in value.items() if k in ("username", "password", "serveraddress")}


def devices(key: str, value: Any) -> list[str]:
    devices = str_list(key, value)
    for dev in devices:
        if not dev.startswith("/"):
            raise SpecError(f"{quote(key)}: {quote(dev)} must be like /dev/x[:/dev/y[:rwm]]")
    return devices


def _int64(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and -MAX_INT64 <= value <= MAX_INT64


def count(key: str, value: Any) -> int:
    if not _int64(value) or value < 0:
        raise SpecError(f"{quote(key)} must be a whole number of seconds >= 0, got {quote(value)}")
    return value


def choice(*allowed: str) -> Check:
    def check(key: str, value: Any) -> str:
        if value not in allowed:
            raise SpecError(f"{quote(key)} must be one of {', '.join(allowed)}, got {quote(value)}")
        return value

    return check


def check_spec(
    kind: str, required: Mapping[str, Check], optional: Mapping[str, tuple[Check, Any]], spec: Any
) -> dict[str, Any]:
    """The normalised spec, or SpecError naming the culprit key."""
    if not isinstance(spec, dict):
        raise SpecError(f"the spec of {kind} must be an object, got {type(spec).__name__}")
    unknown = set(spec) - set(required) - set(optional)
    if unknown:
        raise SpecError(f"unknown keys for {kind}: {quote(', '.join(sorted(map(str, unknown))))}")
    out: dict[str, Any] = {}
    for key, check in required.items():
        out[key] = _need(spec, key, check)
    for key, (check, default) in optional.items():
        out[key] = check(key, spec[key]) if key in spec and spec[key] is not None else default
    return out
