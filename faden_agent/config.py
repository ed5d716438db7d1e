"""Environment -> one frozen Config.

Each FADEN_NODE_AGENT_* variable is declared once, as a Config field (setting(): default, parser,
help; VARIABLES and the README's table, config_table.py, derive from it). `load_config` parses them
all and fails on the first bad one with one line naming the variable, the value and what is allowed.
"""

from __future__ import annotations

import os
import re
import socket
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, NamedTuple, TypeVar, dataclass_transform
from urllib.parse import urlsplit

from faden_agent.common.durations import MAX_DURATION_S, BadDuration, parse_duration
from faden_agent.common.redact import redact_text, redact_url

PREFIX = "FADEN_NODE_AGENT_"


class ConfigError(ValueError):
    """A bad configuration value; str() is the one-line message for the operator."""


# --- value parsers: each takes the raw string and returns the value or raises ValueError
# with the "allowed" part of the message.


def _positive_float(raw: str) -> float:
    try:
        value = float(raw)
    except ValueError:
        raise ValueError("a positive number") from None
    if not value > 0 or value != value or value == float("inf"):
        raise ValueError("a positive number")
    return value


def _seconds(raw: str) -> float:
    try:
        return parse_duration(raw, "seconds")
    except BadDuration:
        raise ValueError(f"a positive number of seconds, at most {MAX_DURATION_S:.0f} (e.g. 90, 90s, 5m)") from None


def _positive_int(raw: str) -> int:
    try:
        value = int(raw)
    except ValueError:
        raise ValueError("a positive whole number") from None
    if value <= 0:
        raise ValueError("a positive whole number")
    return value


def _non_negative_number(raw: str) -> float:
    try:
        value = float(raw)
    except ValueError:
        raise ValueError("a number >= 0") from None
    if not value >= 0 or value == float("inf"):
        raise ValueError("a number >= 0")
    return value


def _docker_size(raw: str) -> str:
    if not re.fullmatch(r"[1-9][0-9]{0,9}[kmg]?", raw.strip().lower()):
        raise ValueError("a size as Docker writes it: a whole number with k, m or g, e.g. 100m")
    return raw.strip().lower()


def _int_between(raw: str, low: int, high: int, expected: str) -> int:
    try:
        value = int(raw.strip())
    except ValueError:
        raise ValueError(expected) from None
    if not low <= value <= high:
        raise ValueError(expected)
    return value


def _port(raw: str) -> int:
    return _int_between(raw, 1, 65535, "a port number 1..65535")


def _capture_bytes(raw: str) -> int:
    return _int_between(raw, 8192, 61440, "a byte count 8192..61440 (a capture is one Loki line)")


def _nice(raw: str) -> int:
    return _int_between(raw, 0, 19, "a nice increment 0..19")


def _bool(raw: str) -> bool:
    lowered = raw.strip().lower()
    if lowered in ("1", "true", "yes", "on"):
        return True
    if lowered in ("0", "false", "no", "off"):
        return False
    raise ValueError("one of true, false, 1, 0, yes, no, on, off")


def _url(raw: str) -> str:
    parts = urlsplit(raw.strip())
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError("an http:// or https:// URL with a host")
    try:
        parts.port  # noqa: B018 - raises on a non-numeric port
    except ValueError:
        raise ValueError("an http:// or https:// URL with a valid port") from None
    return raw.strip().rstrip("/")


def _optional_url(raw: str) -> str | None:
    return _url(raw) if raw.strip() else None


def _scheme(raw: str) -> str:
    if raw not in ("http", "https"):
        raise ValueError("one of http, https")
    return raw


def _peer_start(raw: str) -> str:
    if raw not in ("on_demand", "always"):
        raise ValueError("one of on_demand, always")
    return raw


def _listen_addr(raw: str) -> str | None:
    """host:port (an IPv6 host in brackets; port 0: one the kernel picks), or off/empty: None."""
    value = raw.strip()
    if value.lower() in ("", "off"):
        return None
    host, sep, port = value.rpartition(":")
    host = host[1:-1] if host.startswith("[") and host.endswith("]") else host
    if not sep or not host or any(ch.isspace() or ch in "[]/" for ch in host):
        raise ValueError("host:port (e.g. 127.0.0.1:9481, [::1]:9481) or off")
    number = _int_between(port, 0, 65535, "host:port with a port 0..65535, or off")
    return f"{value.rsplit(':', 1)[0]}:{number}"


def listen_host_port(addr: str) -> tuple[str, int]:
    """The (host, port) of a value _listen_addr accepted."""
    host, _, port = addr.rpartition(":")
    return host.strip("[]"), int(port)


def _text(raw: str) -> str:
    value = raw.strip()
    if not value or any(ch.isspace() for ch in value):
        raise ValueError("a non-empty value without spaces")
    return value


def _optional_text(raw: str) -> str | None:
    return raw.strip() or None


def _path(raw: str) -> Path:
    if not raw.strip():
        raise ValueError("a file system path")
    return _expanded(raw.strip())


def _expanded(raw: str) -> Path:
    try:
        return Path(raw).expanduser()
    except RuntimeError:  # ~name of a user that does not exist
        raise ValueError("a file system path whose ~user exists") from None


def _optional_path(raw: str) -> Path | None:
    return _path(raw) if raw.strip() else None


def _log_level(raw: str) -> str:
    lowered = raw.strip().lower()
    if lowered not in ("debug", "info", "warning", "error"):
        raise ValueError("one of debug, info, warning, error")
    return lowered


def _structured_metadata(raw: str) -> str:
    lowered = raw.strip().lower()
    if lowered not in ("auto", "on", "off"):
        raise ValueError("one of auto, on, off")
    return lowered


def _push_format(raw: str) -> str:
    lowered = raw.strip().lower()
    if lowered not in ("protobuf", "json"):
        raise ValueError("one of protobuf, json")
    return lowered


# Loki's tenant ID rules (its tenant package): at most 150 of these characters, not . or ..
_TENANT = re.compile(r"[A-Za-z0-9!\-_.*'()]{1,150}")


def loki_tenant(raw: str) -> str | None:
    """A Loki tenant ID (X-Scope-OrgID) or None when empty; ValueError when Loki would refuse it."""
    value = raw.strip()
    if not value:
        return None
    if not _TENANT.fullmatch(value) or value in (".", ".."):
        raise ValueError("a Loki tenant ID: at most 150 of A-Z a-z 0-9 ! - _ . * ' ( ), not . or ..")
    return value


def _path_list(raw: str) -> tuple[Path, ...]:
    return tuple(_expanded(p) for p in raw.split(":") if p.strip())


MAX_LABELS = 32
MAX_LABEL_CHARS = 63
_LABEL_KEY = re.compile(r"[A-Za-z0-9]([A-Za-z0-9._/-]{0,61}[A-Za-z0-9])?")
_LABEL_VALUE = re.compile(r"([A-Za-z0-9]([A-Za-z0-9._-]{0,61}[A-Za-z0-9])?)?")


def node_labels(raw: str) -> tuple[tuple[str, str], ...]:
    """`key=value,...` -> ((key, value), ...) sorted by key; ValueError naming the first bad pair."""
    pairs: dict[str, str] = {}
    for item in (part.strip() for part in raw.split(",")):
        if not item:
            continue
        key, sep, value = (half.strip() for half in item.partition("="))
        shown = redact_text(repr(item[:80]))
        if not sep:
            raise ValueError(f"key=value pairs separated by commas: {shown} has no =")
        if not _LABEL_KEY.fullmatch(key):
            raise ValueError(
                f"a label key of 1-{MAX_LABEL_CHARS} letters, digits and . _ / - (alphanumeric at both ends): {shown}"
            )
        if not _LABEL_VALUE.fullmatch(value):
            raise ValueError(
                f"a label value of at most {MAX_LABEL_CHARS} letters, digits and . _ - (alphanumeric at both ends):"
                f" {shown}"
            )
        if key in pairs:
            raise ValueError(f"each key once: {key!r} is given twice")
        pairs[key] = value
        if len(pairs) > MAX_LABELS:
            raise ValueError(f"at most {MAX_LABELS} labels")
    return tuple(sorted(pairs.items()))


_INTERFACE = re.compile(r"[A-Za-z0-9_.:@-]{1,15}")  # the kernel's IFNAMSIZ less the NUL


def _interfaces(raw: str) -> tuple[str, ...]:
    names = tuple(name.strip() for name in raw.split(",") if name.strip())
    bad = next((name for name in names if not _INTERFACE.fullmatch(name) or name in (".", "..")), None)
    if bad is not None:
        raise ValueError(f"interface names separated by commas (1-15 characters, no / or space): {bad[:40]!r}")
    if len(names) > 64:
        raise ValueError("at most 64 interface names")
    return names


def _auto_count(raw: str) -> int | None:
    """`auto` (None) or a whole number >= 0."""
    if raw.strip().lower() == "auto":
        return None
    return _int_between(raw, 0, 4096, "auto or a whole number >= 0")


def _auto_number(raw: str) -> float | None:
    """`auto` (None) or a number >= 0."""
    if raw.strip().lower() == "auto":
        return None
    try:
        return _non_negative_number(raw)
    except ValueError:
        raise ValueError("auto or a number >= 0") from None


def _hold(raw: str) -> float | None:
    """`boot` (None: until the next boot) or a duration."""
    if raw.strip().lower() == "boot":
        return None
    try:
        return _seconds(raw)
    except ValueError:
        raise ValueError("boot or a positive number of seconds (e.g. 90, 90s, 5m, 1h)") from None


# --- defaults that depend on the machine


def _is_root() -> bool:
    return os.geteuid() == 0


def default_state_path() -> str:
    if _is_root():
        return "/var/lib/faden-agent/state.json"
    return str(Path.home() / ".local/share/faden-agent/state.json")


def default_runtime_dir() -> str:
    if _is_root():
        return "/run/faden-agent"
    xdg = os.environ.get("XDG_RUNTIME_DIR")
    if xdg:
        return str(Path(xdg) / "faden-agent")
    return f"/tmp/faden-agent-{os.getuid()}"


def default_ray_log_dir() -> str:
    if _is_root():
        return "/var/log/faden-agent/ray"
    return str(Path.home() / ".local/state/faden-agent/ray")


def route_address(url: str) -> str | None:
    """The source address the kernel would pick to reach the URL's host (no packet sent)."""
    parts = urlsplit(url)
    host = parts.hostname
    if not host:
        return None
    port = parts.port or (443 if parts.scheme == "https" else 80)
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_DGRAM)
    except OSError:
        return None
    for family, _, _, _, sockaddr in infos:
        try:
            with socket.socket(family, socket.SOCK_DGRAM) as probe:
                probe.connect(sockaddr)  # UDP connect only selects a route
                return probe.getsockname()[0]
        except OSError:
            continue
    return None


class Variable(NamedTuple):
    field: str
    default: str | None  # None: computed (see _computed_defaults) or unset
    parse: Callable[[str], Any]
    help: str  # one line of Markdown: the meaning cell of the README's table (config_table.py)
    secret: bool = False
    old_fields: tuple[str, ...] = ()  # earlier names, still read when the variable is unset
    default_words: str = ""  # a computed default in words, or a reading of the declared one ("64 GiB")


def setting(
    env_default: str | None,
    parse: Callable[[str], Any],
    help: str,
    *,
    secret: bool = False,
    old_fields: tuple[str, ...] = (),
    default_words: str = "",
) -> Any:
    """A Config field read from its variable: its Variable, the field's name filled in by
    _settings_class. No default of the class's: load_config fills every field."""
    return Variable("", env_default, parse, help, secret, old_fields, default_words)


_Class = TypeVar("_Class")


@dataclass_transform(frozen_default=True, field_specifiers=(setting,))
def _settings_class(cls: type[_Class]) -> type[_Class]:
    """A frozen class of the fields `cls` annotates, in order, each given by keyword (type
    checkers know setting() fields as required): a setting()'s Variable goes to its
    _variables, another value is the field's default. Not a dataclass: generating one's
    methods was a hundredth of the agent's start (docs/benchmarks.md, round 18)."""
    names = tuple(vars(cls).get("__annotations__", {}))
    variables: list[Variable] = []
    defaults: dict[str, Any] = {}
    for name in names:
        if name not in vars(cls):
            continue
        value = vars(cls)[name]
        if isinstance(value, Variable):
            variables.append(value._replace(field=name))
        else:
            defaults[name] = value
        delattr(cls, name)  # an instance's own value is the only one
    known = frozenset(names)

    def __init__(self: Any, **values: Any) -> None:
        missing = [name for name in names if name not in values and name not in defaults]
        unknown = sorted(values.keys() - known)
        if missing or unknown:
            raise TypeError(f"{cls.__name__}() missing {missing}, unknown {unknown}")
        self.__dict__.update(defaults)
        self.__dict__.update(values)

    cls.__init__ = __init__  # type: ignore[method-assign]
    cls.__setattr__ = _frozen  # type: ignore[method-assign]
    cls.__delattr__ = _frozen  # type: ignore[method-assign]
    cls._field_names = names  # type: ignore[attr-defined]
    cls._variables = tuple(variables)  # type: ignore[attr-defined]
    return cls


def _frozen(self: object, name: str, *value: Any) -> None:
    raise AttributeError(f"cannot change {type(self).__name__}.{name}: it is frozen")


def env_name(field: str) -> str:
    return PREFIX + field.upper()


@_settings_class
class Config:
    backend_url: str = setting("http://127.0.0.1:8000", _url, "Backend base URL")
    agent_id: str = setting(None, _text, "Agent id", default_words="hostname")
    host: str = setting(
        None,
        _text,
        "This machine's address (the source address the kernel picks to reach the backend; no packet is sent)",
        default_words="route address to the backend, else hostname",
    )
    advertise_host: str = setting(
        None, _text, "Address the backend advertises for this machine", default_words="route address, else `HOST`"
    )
    advertise_scheme: str = setting("http", _scheme, "`http` or `https` (also of the peer port)")
    peer_port: int = setting(
        "7480",
        _port,
        "Port on `ADVERTISE_HOST` where peer machines of the cluster fetch images from this one"
        ' (docs/protocol.md, "Images from peers")',
    )
    peer_start: str = setting(
        "on_demand",
        _peer_start,
        "When the peer worker starts: `on_demand` (once the backend puts this machine in a cluster or asks it to"
        " serve an image or a probe; never stopped after) or `always`",
    )
    peer_cert_file: Path | None = setting(
        None, _optional_path, "PEM certificate of the peer port when `ADVERTISE_SCHEME` is `https`"
    )
    peer_key_file: Path | None = setting(
        None, _optional_path, "PEM private key of the peer port when `ADVERTISE_SCHEME` is `https`"
    )
    peer_fetch_max_bytes: int = setting(
        str(64 << 30),
        _positive_int,
        "Most bytes an image fetched from a peer may have when the `image.fetch` command names no `size_bytes`"
        " (the peer's own size headers are never a bound)",
        default_words="64 GiB",
    )
    enrollment_token: str | None = setting(None, _optional_text, "One-time enrollment token", secret=True)
    enrollment_token_file: Path | None = setting(
        None, _optional_path, "File holding the token, so it need not sit in a unit's environment"
    )
    env_file: Path | None = setting(
        None,
        _optional_path,
        "The service's environment file; the agent removes the enrollment token from it once the token is spent",
        default_words="set by the unit",
    )
    state_path: Path = setting(
        None,
        _path,
        "State file (mode 0600); the outbox and command journal live beside it",
        default_words="`/var/lib/faden-agent/state.json` as root, else `~/.local/share/faden-agent/state.json`",
    )
    runtime_dir: Path = setting(
        None,
        _path,
        "IPC sockets, mode 0700",
        default_words="`/run/faden-agent` as root, else `$XDG_RUNTIME_DIR/faden-agent` or `/tmp/faden-agent-UID`",
    )
    heartbeat_interval_sec: float = setting("15", _seconds, "Heartbeat interval")
    heartbeat_full_sec: float = setting(
        "300",
        _seconds,
        "Longest time between heartbeats carrying the full detail (worker table, version); between them beats"
        " carry it only when it changed",
    )
    inventory_interval_sec: float = setting("60", _seconds, "Inventory interval")
    inventory_usage_sec: float = setting(
        "300",
        _seconds,
        "Gauge age: a gauge (load, memory, utilization, power, ...) that moved less than its threshold is sent"
        " again once its last value is this old (docs/inventory.md, Gauges); a change goes at the next interval",
    )
    inventory_probe_timeout_sec: float = setting(
        "10",
        _seconds,
        "Bound on each inventory probe (host, disks, network, Docker, GPU); a slower one is reported as overrun",
    )
    gpu_throttle_sec: float = setting(
        "60",
        _seconds,
        "How long a hardware slowdown, thermal or power-brake clock event may last before the GPU is degraded",
    )
    gpu_rising_sec: float = setting(
        "600",
        _seconds,
        "How long a rise of a GPU error counter (uncorrected ECC, NVLink, PCIe replay) keeps the GPU degraded",
    )
    gpu_xid_hold_sec: float = setting(
        "3600",
        _seconds,
        "Longest an Xid whose catalogue action is neither a reset nor a reboot counts towards its GPU's verdict;"
        " reset- and reboot-class Xids count until that remedy is seen, whatever this says"
        " ([docs/inventory.md](docs/inventory.md#holds))",
    )
    boot_id_file: Path = setting(
        "/proc/sys/kernel/random/boot_id",
        _path,
        "The kernel's boot id: a new one is a reboot, which ends the hold of a reboot-class Xid; tests point it at"
        " a file",
    )
    kmsg_path: Path = setting(
        "/dev/kmsg",
        _path,
        "The kernel's log where the host has no journal this agent can read"
        " ([docs/inventory.md](docs/inventory.md#kernel-lines)); tests point it at a file or FIFO",
    )
    systemctl: str = setting(
        "systemctl",
        _text,
        "The systemctl asked for the fabric manager's unit (`nvidia-fabricmanager`) on NVSwitch machines;"
        " tests point it at a stand-in",
    )
    dcgmi: str = setting(
        "dcgmi",
        _text,
        "DCGM's command line, for `gpu.check` (its diagnostic `dcgmi diag`); where it is not found the check is"
        " NVML's own ([docs/commands.md](docs/commands.md#gpucheck)); tests point it at a stand-in",
    )
    nvidia_smi: str = setting(
        "nvidia-smi",
        _text,
        "The nvidia-smi that resets a GPU for `gpu.reset` ([docs/commands.md](docs/commands.md#gpureset));"
        " tests point it at a stand-in",
    )
    workload_scrape_sec: float = setting(
        "15",
        _seconds,
        "How often the metrics port of each managed container whose spec names one (`metrics_port`) is scraped,"
        " one container at a time ([docs/commands.md](docs/commands.md#forward-progress-of-serving-containers))",
    )
    workload_stall_sec: float = setting(
        "120",
        _seconds,
        "A serving container with requests running or waiting whose token counter has not moved this long is"
        " reported `workload.stalled` (idle is no stall)",
    )
    workload_fault_window_sec: float = setting(
        "300",
        _seconds,
        "A container death, OOM or unhealthy event is `suspected: hardware` when one of the GPUs it used had a"
        " GPU-fault Xid or turned failed this long before it (or in the few seconds after), else `application`"
        " ([docs/commands.md](docs/commands.md#events))",
    )
    stall_capture: bool = setting(
        "true",
        _bool,
        "When a serving container stalls (`workload.stalled`) or dies with a `hardware` cause, capture its Python"
        " stacks (py-spy), its GPUs' state and its last log lines as one Loki entry the event names, once"
        " ([docs/inventory.md](docs/inventory.md#evidence-at-a-stall)); `false`: no capture",
    )
    stall_capture_max_bytes: int = setting(
        "49152",
        _capture_bytes,
        "Most bytes of one capture (one Loki line, 8192..61440); past it the least telling parts are cut first",
    )
    traffic_interval_sec: float = setting(
        "10",
        _seconds,
        "How often traffic to peer machines, NICs and RDMA ports is sampled; a record is sent only when it changed",
    )
    sysfs_root: Path = setting(
        "/sys",
        _path,
        "Where sysfs is mounted (InfiniBand/RoCE ports under class/infiniband, the PCI tree, NIC links);"
        " tests point it at a fake tree",
    )
    labels: tuple[tuple[str, str], ...] = setting(
        "",
        node_labels,
        "Operator labels of this machine, `key=value,...` (at most 32; keys and values of at most 63 letters,"
        " digits and `. _ -`, keys also `/`), sent at enrollment and in the inventory"
        " ([docs/protocol.md](docs/protocol.md#labels-and-topology))",
    )
    data_nics: tuple[str, ...] = setting(
        "",
        _interfaces,
        "Interfaces whose link must be up (comma-separated): the `network_link_down` condition;"
        " unset: the network interfaces of the RDMA devices, once seen up"
        " ([docs/inventory.md](docs/inventory.md#node-conditions))",
    )
    ib_min_ports: int | None = setting(
        "auto",
        _auto_count,
        "InfiniBand ports that must be active (`infiniband_port_down`); `auto`: gpud's table by GPU model on a"
        " machine of 8 or more GPUs (8 for H100, H200, B200, GB200; 1 for A100), else no count; `0`: no count",
    )
    ib_min_rate_gbps: float | None = setting(
        "auto",
        _auto_number,
        "Rate an active InfiniBand port must reach (`infiniband_rate_low`); `auto`: gpud's table by GPU model on a"
        " machine of 8 or more GPUs (400 for H100, H200, B200, GB200; 200 for A100), else none; `0`: none",
    )
    ib_rising_sec: float = setting(
        "600",
        _seconds,
        "How long a rise of an InfiniBand port's link-down or error counter keeps `infiniband_errors_rising`",
    )
    clock_max_error_sec: float = setting(
        "16",
        _seconds,
        "The kernel's clock counts as synchronised while its maximum error is below this (timedatectl's rule:"
        " 16 s); above it the `clock_unsynchronised` condition",
    )
    clock_status_file: Path | None = setting(
        None,
        _optional_path,
        "Read the kernel's clock status from this file (`adjtimex --print`'s `name: value` lines) instead of"
        " adjtimex(2); tests point it at a file they write",
    )
    kernel_hung_task_hold_sec: float | None = setting(
        "boot",
        _hold,
        "How long a kernel line of a hung task (`blocked for more than N seconds`) keeps `kernel_hung_task`;"
        " `boot`: until the next boot (node-problem-detector's `KernelDeadlock`)"
        " ([docs/inventory.md](docs/inventory.md#node-conditions))",
    )
    kernel_lockup_hold_sec: float | None = setting(
        "3600",
        _hold,
        "How long a soft or hard lockup line keeps `kernel_lockup` (node-problem-detector's temporary problems:"
        " a Kubernetes event, kept 1 h); `boot`: until the next boot",
    )
    hardware_error_uncorrected_hold_sec: float | None = setting(
        "boot",
        _hold,
        "How long an uncorrected machine check or EDAC `UE` line keeps `hardware_error_uncorrected`; `boot`: until"
        " the next boot (the remedy of a reboot-class Xid)",
    )
    hardware_error_corrected_hold_sec: float | None = setting(
        "3600",
        _hold,
        "How long a corrected machine check or EDAC `CE` line keeps `hardware_error_corrected`"
        " (node-problem-detector's `CE memory read error`, a temporary problem: 1 h); `boot`: until the next boot",
    )
    oom_kill_hold_sec: float | None = setting(
        "3600",
        _hold,
        "How long the kernel's OOM killer acting for the whole machine keeps `oom_kill` (node-problem-detector's"
        " `OOMKilling`, a temporary problem: 1 h); `boot`: until the next boot",
    )
    reconnect_min_sec: float = setting("2", _seconds, "Smallest reconnect delay")
    reconnect_max_sec: float = setting("30", _seconds, "Largest reconnect delay")
    request_timeout_sec: float = setting("20", _seconds, "Bound on every backend request")
    stream_keepalive_sec: float = setting(
        "15", _seconds, "Keepalive interval asked of the backend's stream; 3 silent intervals mean a dead stream"
    )
    verify_tls: bool = setting(
        "true",
        _bool,
        "Verify the TLS certificates of the backend, Loki and peers (against the system's trust store, or the"
        " public CA bundle the agent carries, certifi's, where the host has none; `CA_BUNDLE` overrides both)",
    )
    ca_bundle: Path | None = setting(
        None,
        _optional_path,
        "PEM file of CA certificates to trust instead of the system's store (private CAs); requests'"
        " `REQUESTS_CA_BUNDLE` and `CURL_CA_BUNDLE` are not read",
    )
    loki_url: str | None = setting(None, _optional_url, "Loki base URL; unset: ask the backend where to push")
    log_batch_size: int = setting("1000", _positive_int, "Most lines in one Loki push (and about 1 MiB)")
    log_flush_interval_sec: float = setting("5", _seconds, "Longest wait before a partial batch is pushed")
    log_multiline: bool = setting(
        "true",
        _bool,
        "Join continuation lines of container and Ray logs (a traceback, an indented block, unprefixed lines"
        " after a prefixed one) into one Loki entry, at most 500 lines and 64 KiB"
        " ([docs/logs.md](docs/logs.md#multiline-and-level)); `false`: one entry a line",
    )
    log_multiline_wait_sec: float = setting(
        "1", _seconds, "How long a joined entry waits for a further continuation line after its last one"
    )
    log_nice: int = setting(
        "10",
        _nice,
        "Added to the log worker's (and its journalctl's) nice value: a log flood yields the CPU to heartbeats"
        " and commands; 0 keeps the agent's",
    )
    loki_structured_metadata: str = setting(
        "auto",
        _structured_metadata,
        "Per-line detail as Loki structured metadata: `auto` (until the target refuses it), `on` (always tried"
        " first), `off` (kept in the line; [docs/logs.md](docs/logs.md#labels))",
    )
    loki_push_format: str = setting(
        "protobuf",
        _push_format,
        "Body of direct Loki pushes: `protobuf` (Loki's own, snappy; least CPU for both sides) or `json` (gzip);"
        " pushes through the backend are JSON ([docs/logs.md](docs/logs.md#push-format))",
    )
    loki_tenant: str | None = setting(
        None,
        loki_tenant,
        "Loki tenant ID sent as `X-Scope-OrgID` (a multi-tenant Loki); unset: the backend's log target may name one",
    )
    journal_directory: Path | None = setting(
        None, _optional_path, "Read journal files from this directory instead of the system journal"
    )
    ray_log_dir: Path = setting(
        None,
        _path,
        "Host directory for the Ray session logs of managed Ray containers",
        default_words="`/var/log/faden-agent/ray` as root, else `~/.local/state/faden-agent/ray`",
    )
    ray_log_retention_sec: float = setting(
        "3600",
        _seconds,
        "The Ray logs of a removed container are deleted once shipped (after a minute without the container);"
        " after this long they are deleted anyway and their unshipped lines reported as `logs.lines_lost`"
        " (`unshipped_at_retention`) ([docs/logs.md](docs/logs.md#ray-log-retention))",
    )
    ray_log_max_bytes: int = setting(
        str(4 * 1024**3),
        _positive_int,
        "Cap on one container's Ray log directory (4 GiB); past it its oldest sessions (never the newest) are"
        " deleted, unshipped lines reported as `logs.lines_lost` (`ray_log_cap`)",
    )
    disk_paths: tuple[Path, ...] = setting(
        "", _path_list, "Extra paths (colon-separated) whose file systems the inventory reports, e.g. model caches"
    )
    disk_low_percent: float = setting(
        "10",
        _non_negative_number,
        "A file system is low on space below this share free, or below `DISK_LOW_GIB`, whichever is smaller: the"
        " inventory's `low` flag, the `disk.low`/`disk.recovered` events, `doctor`"
        " ([docs/inventory.md](docs/inventory.md#low-disk-events))",
    )
    disk_low_gib: float = setting(
        "20",
        _non_negative_number,
        "A file system is low on space below this many GiB free, or below `DISK_LOW_PERCENT`, whichever is smaller",
    )
    docker_host: str | None = setting(
        None, _optional_text, "Docker engine address", default_words="`DOCKER_HOST`, else the local socket"
    )
    docker_timeout_sec: float = setting(
        "60", _seconds, "Bound on each Docker engine call; a hung engine fails commands with `timeout` after it"
    )
    max_concurrent_pulls: int = setting("3", _positive_int, "Most image pulls at once")
    pull_space_factor: float = setting(
        "3",
        _non_negative_number,
        "A pull needs this many times the compressed size of the layers the engine lacks (the registry's manifest"
        " for this platform), plus 256 MiB, free on Docker's data root, or fails `no_space` before it starts;"
        " `0`: no check ([docs/commands.md](docs/commands.md#space-before-a-pull))",
    )
    command_retention_days: float = setting(
        "30",
        _positive_float,
        "Done commands older than this are deleted from the executor's journal (a re-delivery after that runs again)",
    )
    container_log_max_size: str = setting(
        "100m", _docker_size, "Docker json-file log cap of each managed container: the size of one file (`max-size`)"
    )
    container_log_max_files: int = setting(
        "3",
        _positive_int,
        "Docker json-file log cap of each managed container: files kept (`max-file`); 100m x 3 = 300 MiB per container",
    )
    policy_file: Path | None = setting(
        None,
        _optional_path,
        "JSON host policy for `container.run`: which bind mounts, capabilities, devices, host namespaces and"
        " `privileged` the backend may ask for; unset: defaults fit for Ray and vLLM"
        " (docs/commands.md, Host policy)",
    )
    worker_liveness_sec: float = setting(
        "3",
        _seconds,
        "How often each worker tells the supervisor it is alive (a few times per `WORKER_HANG_TIMEOUT_SEC`; each"
        " message wakes the supervisor)",
        old_fields=("worker_heartbeat_sec",),
    )
    worker_hang_timeout_sec: float = setting(
        "10", _seconds, "A worker silent this long is dumped, killed and restarted"
    )
    restart_backoff_min_sec: float = setting(
        "0.2",
        _seconds,
        "Restart delay after a second failure of a worker within the restart window (+-20 % jitter, doubling per"
        " further exit); a first failure restarts at once",
    )
    restart_backoff_max_sec: float = setting("30", _seconds, "Largest restart delay")
    restart_max: int = setting("5", _positive_int, "Restarts allowed within the window before a worker goes FATAL")
    restart_window_sec: float = setting("60", _seconds, "Window of the restart-intensity limit")
    fatal_retry_sec: float = setting(
        "300", _seconds, "Pause before a FATAL worker is tried again (never given up for good)"
    )
    stop_timeout_sec: float = setting("10", _seconds, "Orderly-stop bound before stragglers are killed")
    prefork: bool = setting(
        "on",
        _bool,
        "The memory tricks of the supervisor before it forks the workers (`faden_agent/supervisor/prefork/`)"
        " and of each worker once set up: `on` or `off`. Off runs none of them (no ctypes writes into the"
        " interpreter's objects, no held heap chunks or pool blocks, no library pages handed back, glibc's"
        " malloc arenas at its default) and costs about 15 MiB more"
        " PSS over the idle tree on CPython 3.12, 4 MiB on 3.11 (`bench/footprint_bench.py --prefork`; each"
        " trick's share: `docs/design-notes.md`)",
    )
    log_level: str = setting("info", _log_level, "`debug`, `info`, `warning` or `error`")
    metrics_addr: str | None = setting(
        "127.0.0.1:9481",
        _listen_addr,
        "Where the supervisor serves `/metrics` (Prometheus), `/healthz` and `/readyz`"
        " ([docs/service.md](docs/service.md#metrics-and-health-checks)); `off`: none; port `0`: any free one"
        " (`ps` shows it)",
    )
    route_address: str | None = None

    @property
    def state_dir(self) -> Path:
        return self.state_path.parent

    def __repr__(self) -> str:  # a Config in a traceback or a test report shows no secret
        return "Config(" + ", ".join(f"{name}={value!r}" for name, value in self.redacted().items()) + ")"

    def token(self) -> str | None:
        """The enrollment token: the variable, else the token file's first line."""
        if self.enrollment_token:
            return self.enrollment_token
        if self.enrollment_token_file is None:
            return None
        try:
            text = self.enrollment_token_file.read_text().strip()
        except OSError as exc:
            raise ConfigError(
                f"{env_name('enrollment_token_file')}={self.enrollment_token_file}: "
                f"cannot read the token file ({exc.strerror})"
            ) from None
        return text.splitlines()[0].strip() if text else None

    def tls_verify(self) -> bool | str:
        """The value for requests' `verify=`: False, True, or the CA bundle's path."""
        if not self.verify_tls:
            return False
        return str(self.ca_bundle) if self.ca_bundle else True

    def speaks_tls(self) -> bool:
        """Whether the backend or Loki is https: the supervisor then builds the TLS context
        before it forks (tls.py)."""
        return any(url and url.lower().startswith("https://") for url in (self.backend_url, self.loki_url))

    def redacted(self) -> dict[str, Any]:
        """Every setting by its variable name, secrets replaced, for `faden-agent config`."""
        out: dict[str, Any] = {}
        for var in VARIABLES:
            value = getattr(self, var.field)
            if var.secret and value:
                value = "<redacted>"
            elif isinstance(value, str) and var.parse in (_url, _optional_url):
                value = redact_url(value)  # https://user:key@logs... shows as https://<redacted>@logs...
            elif isinstance(value, Path):
                value = str(value)
            elif var.parse is node_labels:
                value = ",".join(f"{key}={label}" for key, label in value)
            elif var.parse is _interfaces:
                value = ",".join(value)
            elif isinstance(value, tuple):
                value = ":".join(str(v) for v in value)
            out[env_name(var.field)] = value
        return out


VARIABLES: tuple[Variable, ...] = vars(Config)["_variables"]


def _computed_defaults(values: dict[str, Any]) -> None:
    hostname = socket.gethostname()
    route = route_address(values["backend_url"])
    values["route_address"] = route
    values.setdefault("agent_id", hostname)
    values.setdefault("host", route or hostname)
    values.setdefault("advertise_host", route or values["host"])
    values.setdefault("state_path", Path(default_state_path()))
    values.setdefault("runtime_dir", Path(default_runtime_dir()))
    values.setdefault("ray_log_dir", Path(default_ray_log_dir()))
    for var in VARIABLES:
        values.setdefault(var.field, None)


def _check_relations(values: dict[str, Any]) -> None:
    if values["reconnect_min_sec"] > values["reconnect_max_sec"]:
        raise ConfigError(
            f"{env_name('reconnect_min_sec')}={values['reconnect_min_sec']:g} is larger than "
            f"{env_name('reconnect_max_sec')}={values['reconnect_max_sec']:g}: "
            "the minimum must not exceed the maximum"
        )
    if values["restart_backoff_min_sec"] > values["restart_backoff_max_sec"]:
        raise ConfigError(
            f"{env_name('restart_backoff_min_sec')} is larger than {env_name('restart_backoff_max_sec')}: "
            "the minimum must not exceed the maximum"
        )
    if values["ca_bundle"] is not None and not values["ca_bundle"].is_file():
        raise ConfigError(f"{env_name('ca_bundle')}={values['ca_bundle']}: no such file")


def load_config(environ: Mapping[str, str] | None = None, **overrides: Any) -> Config:
    """Parse the environment; raise ConfigError with one line naming the culprit."""
    env = os.environ if environ is None else environ
    values: dict[str, Any] = {}
    for var in VARIABLES:
        name = env_name(var.field)
        raw = env.get(name)
        for old in var.old_fields:  # an env file written for an older agent still works
            if raw is None and env.get(env_name(old)) is not None:
                name = env_name(old)
                raw = env[name]
        if raw is None:
            if var.default is None:
                continue
            raw = var.default
        try:
            values[var.field] = var.parse(raw)
        except ValueError as exc:
            shown = "<redacted>" if var.secret else redact_text(repr(raw))
            raise ConfigError(f"{name}={shown} is not allowed: expected {exc}") from None
    values.update(overrides)
    _computed_defaults(values)
    _check_relations(values)
    return Config(**values)


def config_fields() -> list[str]:
    return list(vars(Config)["_field_names"])
