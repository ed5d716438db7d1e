"""What a pull will download: the image's manifest for this engine's platform, asked of the
registry directly, and the compressed size of the layers the engine does not hold yet.
All requests share one deadline and an abort (sockets shut); every answer is size-capped;
whatever fails (no answer, refused, an odd manifest) gives None: the engine's verdict follows."""

from __future__ import annotations

import ipaddress
import re
import socket
import threading
import time
from collections.abc import Callable
from typing import Any
from urllib.parse import urlsplit

import requests
from docker.utils import parse_repository_tag
from requests.adapters import HTTPAdapter
from urllib3.connection import HTTPConnection, HTTPSConnection
from urllib3.connectionpool import HTTPConnectionPool, HTTPSConnectionPool

from faden_agent.http.answerbody import AnswerUnread, read_json_object
from faden_agent.transfers.archive import held_prefix
from faden_agent.transfers.fetch import held_chains
from faden_agent.workers.executor.docker_errors import registry_of

MAX_LAYER_BYTES = 1 << 50
MAX_ANSWER_BYTES = 4 << 20  # a manifest, an index or an image config
ANSWER_DEADLINE_S = 20.0
CHECK_DEADLINE_S = 20.0  # every request of one check together: a dripping head included
TIMEOUT = (5, 10)
INDEX_TYPES = (
    "application/vnd.docker.distribution.manifest.list.v2+json",
    "application/vnd.oci.image.index.v1+json",
)
MANIFEST_TYPES = (
    "application/vnd.docker.distribution.manifest.v2+json",
    "application/vnd.oci.image.manifest.v1+json",
)
ARCHITECTURES = {"x86_64": "amd64", "aarch64": "arm64", "armv7l": "arm", "ppc64le": "ppc64le", "s390x": "s390x"}


class Unknown(Exception):
    """The registry did not tell (reachable or not): the size stays unknown."""


def missing_bytes(
    api: Any,
    image: str,
    auth: dict[str, str] | None,
    on_abort: Callable[[Callable[[], None]], None] | None = None,
    deadline_s: float = CHECK_DEADLINE_S,
) -> int | None:
    """Compressed bytes of the layers of `image` the engine lacks; None when unknown, past
    deadline_s, or when the hook registered with on_abort (cancel, the command's deadline) runs."""
    with _Budget(deadline_s) as budget:
        if on_abort is not None:
            on_abort(budget.abort)
        try:
            info = api.info()
            registry = _Registry(image, auth, _insecure(info, registry_of(image)), budget)
            manifest = registry.manifest(registry.reference)
            if manifest.get("mediaType") in INDEX_TYPES or "manifests" in manifest:
                manifest = registry.manifest(_platform_digest(manifest, info))
            layers = [_layer_size(layer["size"]) for layer in manifest["layers"]]
            diff_ids = [str(d) for d in registry.blob(manifest["config"]["digest"])["rootfs"]["diff_ids"]]
        except (Unknown, AnswerUnread, requests.RequestException, AttributeError, KeyError, TypeError, ValueError):
            return None  # AttributeError: an entry that is no object
    if len(diff_ids) != len(layers):
        return None
    return sum(layers[held_prefix(diff_ids, held_chains(api)) :])


class _Budget:
    """One deadline and one abort for every request of a check: at either, the sockets it
    opened are shut, which ends a read that per-read timeouts never end (a dripping head)."""

    def __init__(self, deadline_s: float):
        self.give_up = time.monotonic() + deadline_s
        self.aborted = False
        self._sockets: list[socket.socket] = []
        self._lock = threading.Lock()
        self._timer = threading.Timer(deadline_s, self.abort)
        self._timer.daemon = True
        self.session = requests.Session()
        adapter = _TrackingAdapter(self._track)
        self.session.mount("http://", adapter)
        self.session.mount("https://", adapter)

    def __enter__(self) -> _Budget:
        self._timer.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._timer.cancel()
        self.session.close()

    def abort(self) -> None:
        with self._lock:
            self.aborted = True
            sockets, self._sockets = self._sockets, []
        for sock in sockets:
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass  # already closed

    def left(self) -> float:
        """Seconds left for the next request; Unknown when none are."""
        left = self.give_up - time.monotonic()
        if self.aborted or left <= 0:
            raise Unknown("the size check was given up (its deadline, or the command's end)")
        return left

    def _track(self, sock: socket.socket) -> None:
        with self._lock:
            self._sockets.append(sock)
            aborted = self.aborted
        if aborted:
            self.abort()


class _TrackingAdapter(HTTPAdapter):
    """requests' adapter whose connections report each socket they open."""

    def __init__(self, track: Callable[[socket.socket], None]):
        self._pools = _tracking_pools(track)
        super().__init__()

    def init_poolmanager(self, *args: Any, **kwargs: Any) -> None:
        super().init_poolmanager(*args, **kwargs)
        self.poolmanager.pool_classes_by_scheme = self._pools

    def proxy_manager_for(self, proxy: str, **kwargs: Any) -> Any:
        manager = super().proxy_manager_for(proxy, **kwargs)
        manager.pool_classes_by_scheme = self._pools
        return manager


def _tracking_pools(track: Callable[[socket.socket], None]) -> dict[str, type]:
    class Plain(HTTPConnection):
        def _new_conn(self) -> socket.socket:
            sock = super()._new_conn()
            track(sock)
            return sock

    class Tls(HTTPSConnection):
        def _new_conn(self) -> socket.socket:
            sock = super()._new_conn()
            track(sock)
            return sock

    return {
        "http": type("PlainPool", (HTTPConnectionPool,), {"ConnectionCls": Plain}),
        "https": type("TlsPool", (HTTPSConnectionPool,), {"ConnectionCls": Tls}),
    }


def _layer_size(value: Any) -> int:
    """A layer's claimed size: a whole number of bytes no disk exceeds (1 PiB), else Unknown."""
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= MAX_LAYER_BYTES:
        raise Unknown(f"a layer size of {str(value)[:40]}")
    return value


def _insecure(info: dict[str, Any], registry: str) -> bool:
    """As the engine decides it: a registry marked insecure, or an address in its CIDRs."""
    config = info.get("RegistryConfig") or {}
    index = (config.get("IndexConfigs") or {}).get(registry)
    if isinstance(index, dict) and index.get("Secure") is False:
        return True
    host = registry.rsplit(":", 1)[0].strip("[]") if registry.count(":") <= 1 else registry.strip("[]")
    try:
        address = ipaddress.ip_address("127.0.0.1" if host == "localhost" else host)
    except ValueError:
        return False
    return any(
        address in ipaddress.ip_network(cidr, strict=False) for cidr in config.get("InsecureRegistryCIDRs") or ()
    )


def _platform_digest(index: dict[str, Any], info: dict[str, Any]) -> str:
    wanted_os = (info.get("OSType") or "linux").lower()
    wanted_arch = ARCHITECTURES.get(str(info.get("Architecture")), str(info.get("Architecture")))
    for entry in index["manifests"]:
        platform = entry.get("platform") or {}
        if platform.get("os") == wanted_os and platform.get("architecture") == wanted_arch:
            return str(entry["digest"])
    raise Unknown("no manifest for this platform")


class _Registry:
    """One repository of one registry, token or basic authentication as it asks."""

    def __init__(self, image: str, auth: dict[str, str] | None, insecure: bool, budget: _Budget):
        self.budget = budget
        repository, reference = parse_repository_tag(image)
        host = registry_of(image)
        path = repository[len(host) + 1 :] if repository.startswith(host + "/") else repository
        if host == "docker.io":
            host, path = "registry-1.docker.io", path if "/" in path else f"library/{path}"
        self.host = host
        self.reference = reference or "latest"
        self.bases = (
            [f"http://{host}/v2/{path}", f"https://{host}/v2/{path}"] if insecure else [f"https://{host}/v2/{path}"]
        )
        self.verify = not insecure
        self.scope = f"repository:{path}:pull"
        self.auth = auth
        self.headers: dict[str, str] = {}

    def manifest(self, reference: str) -> dict[str, Any]:
        if not re.fullmatch(r"[\w][\w.:+-]{0,127}", reference):
            raise Unknown("not a tag or digest")
        return self._get(f"/manifests/{reference}", {"Accept": ", ".join(INDEX_TYPES + MANIFEST_TYPES)})

    def blob(self, digest: str) -> dict[str, Any]:
        if not re.fullmatch(r"sha256:[0-9a-f]{64}", digest):
            raise Unknown("not a digest")
        return self._get(f"/blobs/{digest}", {})

    def _get(self, path: str, headers: dict[str, str]) -> dict[str, Any]:
        for base in self.bases:
            try:
                answer = self._send(base + path, headers)
            except requests.exceptions.ConnectionError:
                continue  # an insecure registry's other scheme
            self.bases = [base]
            return answer
        raise Unknown("the registry did not answer")

    def _send(self, url: str, headers: dict[str, str]) -> dict[str, Any]:
        response = self._request(url, headers)
        if response.status_code == 401 and not self.headers:
            self.headers = self._authorization(response.headers.get("WWW-Authenticate", ""))
            response.close()
            response = self._request(url, headers)
        with response:
            if response.status_code != 200:
                raise Unknown(f"HTTP {response.status_code}")
            return read_json_object(response, MAX_ANSWER_BYTES, min(ANSWER_DEADLINE_S, self.budget.left()))

    def _request(self, url: str, headers: dict[str, str]) -> requests.Response:
        return self._get_from(url, headers={**headers, **self.headers}, verify=self.verify)

    def _get_from(self, url: str, verify: bool, **kwargs: Any) -> requests.Response:
        left = self.budget.left()
        timeout = (min(TIMEOUT[0], left), min(TIMEOUT[1], left))
        return self.budget.session.get(url, stream=True, timeout=timeout, verify=verify, **kwargs)

    def _authorization(self, challenge: str) -> dict[str, str]:
        fields = dict(re.findall(r'(\w+)="([^"]*)"', challenge))
        basic = (self.auth["username"], self.auth["password"]) if self.auth else None
        if challenge.lower().startswith("basic") and basic:
            return {"Authorization": requests.auth._basic_auth_str(*basic)}
        if not challenge.lower().startswith("bearer") or not fields.get("realm", "").startswith(
            ("https://", "http://")
        ):
            raise Unknown("no usable authentication challenge")
        params = {"service": fields.get("service", ""), "scope": fields.get("scope") or self.scope}
        realm = urlsplit(fields["realm"])
        if realm.scheme != "https" and realm.netloc != self.host:
            basic = None  # credentials go in clear text only to the registry itself
        # An insecure registry's leniency is for its own host: a realm elsewhere shows a certificate
        verify = self.verify or realm.netloc != self.host
        with self._get_from(fields["realm"], verify, params=params, auth=basic) as response:
            if response.status_code != 200:
                raise Unknown(f"the token service answered HTTP {response.status_code}")
            answer = read_json_object(response, MAX_ANSWER_BYTES, min(ANSWER_DEADLINE_S, self.budget.left()))
        token = answer.get("token") or answer.get("access_token")
        if not isinstance(token, str):
            raise Unknown("the token service gave no token")
        return {"Authorization": f"Bearer {token}"}
