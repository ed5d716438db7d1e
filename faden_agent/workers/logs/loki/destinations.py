"""Where pushes go: Loki directly, or whatever the backend names."""

from __future__ import annotations

import base64
import gzip
import logging
import threading
from typing import NamedTuple
from urllib.parse import unquote, urlsplit

from faden_agent import __version__, protocol
from faden_agent.backend.client import BackendClient, BackendError, parse_retry_after
from faden_agent.common.errorline import error_line
from faden_agent.common.redact import redact_url
from faden_agent.config import Config
from faden_agent.http import proxies
from faden_agent.http.answerbody import AnswerUnread
from faden_agent.http.client import HttpClient, HttpFailure
from faden_agent.http.tls import client_context
from faden_agent.node.membership import MembershipError, load_membership
from faden_agent.workers.logs.loki import proto as lokiproto
from faden_agent.workers.logs.loki.keepalive import BadAnswer, KeepAliveConnection

JSON = "application/json"
GZIP_LEVEL = 1  # lines compress ~10x even at level 1; higher levels cost CPU for little
MAX_ANSWER_BYTES = 64 * 1024  # Loki's answers are a line or two; more is not read
log = logging.getLogger(__name__)


class Answer(NamedTuple):
    status: int | None  # None: connection error, timeout, nothing to push to yet
    retry_after: float | None = None
    detail: str = ""

    @property
    def ok(self) -> bool:
        return self.status is not None and 200 <= self.status < 300


class DirectLoki:
    """POSTs to Loki over a lean keep-alive connection per sending thread (loki/keepalive.py): a
    push costs a fraction of what requests adds to each request (its per-request
    preparation and environment lookups were a third of the shipper's CPU at 100 lines a
    push) and a sixth of http.client's. When a proxy from the environment applies to Loki's
    host, http/client.py (which speaks proxies) is used instead."""

    resolved = True  # set by the operator: nothing to ask

    def __init__(self, base_url: str, config: Config, tenant: str | None = None):
        self.url = base_url.rstrip("/") + protocol.LOKI_PUSH_PATH
        self.takes_protobuf = config.loki_push_format == "protobuf"
        self.timeout_s = config.request_timeout_sec
        # Our own TLS settings only: REQUESTS_CA_BUNDLE/CURL_CA_BUNDLE in the environment
        # must not override VERIFY_TLS=false or CA_BUNDLE.
        self.verify = config.tls_verify()
        parts = urlsplit(self.url)
        self._https = parts.scheme == "https"
        self._host, self._port = parts.hostname or "", parts.port
        self._path = parts.path + (f"?{parts.query}" if parts.query else "")
        common = {"User-Agent": f"faden-agent/{__version__}"}
        if parts.username is not None:  # https://user:key@loki...: basic auth, as requests did
            pair = f"{unquote(parts.username)}:{unquote(parts.password or '')}".encode()
            common["Authorization"] = "Basic " + base64.b64encode(pair).decode()
        tenant = tenant or config.loki_tenant
        if tenant:
            common["X-Scope-OrgID"] = tenant
        self._headers = {
            JSON: {**common, "Content-Type": JSON, "Content-Encoding": "gzip"},
            lokiproto.CONTENT_TYPE: {**common, "Content-Type": lokiproto.CONTENT_TYPE},  # snappy inside
        }
        self._tls = client_context(self.verify) if self._https else None
        self._local = threading.local()
        self._open: set[KeepAliveConnection] = set()
        self._lock = threading.Lock()
        try:
            proxied = (
                bool(self._host)
                and proxies.proxy_for(parts.scheme, self._host, self._port or (443 if self._https else 80)) is not None
            )
        except proxies.ProxyError:
            proxied = True  # each push fails naming the setting
        self.proxied = HttpClient(self.verify) if proxied else None

    def __str__(self) -> str:  # shown in status, heartbeats and logs: no user:key@
        return redact_url(self.url) or ""

    def send(self, payload: bytes, content_type: str = JSON) -> Answer:
        """POST a push body: JSON (gzipped here) or proto.py's snappy-compressed protobuf."""
        headers = self._headers[content_type]
        body = gzip.compress(payload, compresslevel=GZIP_LEVEL) if content_type == JSON else payload
        if self.proxied is not None:
            return self._send_via_proxy(body, headers)
        for fresh in (False, True):
            conn, reused = self._connection(fresh)
            try:
                reply = conn.post(self._path, headers, body, MAX_ANSWER_BYTES)
                if not reply.reusable:
                    self._drop(conn)  # not read to its end, or the server closes it
                detail = "" if 200 <= reply.status < 300 else reply.body[:300].decode("utf-8", "replace").strip()
                return Answer(reply.status, parse_retry_after(reply.headers.get("retry-after")), detail)
            except (OSError, BadAnswer) as exc:
                self._drop(conn)
                if reused and not fresh and isinstance(exc, ConnectionError):
                    continue  # a kept-alive connection the server closed while idle: once more, anew
                return Answer(None, None, error_line(exc, 300, named=True))
        raise AssertionError("unreachable")

    def _connection(self, fresh: bool) -> tuple[KeepAliveConnection, bool]:
        conn = getattr(self._local, "conn", None)
        if conn is not None and not fresh:
            return conn, True
        conn = KeepAliveConnection(self._host, self._port, self._tls, self.timeout_s)
        self._local.conn = conn
        with self._lock:
            self._open.add(conn)
        return conn, False

    def _drop(self, conn: KeepAliveConnection) -> None:
        conn.close()
        if getattr(self._local, "conn", None) is conn:
            self._local.conn = None
        with self._lock:
            self._open.discard(conn)

    def _send_via_proxy(self, body: bytes, headers: dict[str, str]) -> Answer:
        assert self.proxied is not None
        try:
            reply = self.proxied.request("POST", self.url, body=body, headers=headers, timeout=self.timeout_s)
        except HttpFailure as exc:
            return Answer(None, None, str(exc)[:300])
        with reply:
            try:  # the status decides; the body is read (bounded) for its words and the connection
                text = reply.read_all(MAX_ANSWER_BYTES, self.timeout_s)[:300].decode("utf-8", "replace")
            except AnswerUnread as exc:
                text = f"({exc})"
            detail = "" if 200 <= reply.status < 300 else text.strip()
            return Answer(reply.status, parse_retry_after(reply.headers.get("Retry-After")), detail)

    def close(self) -> None:
        with self._lock:
            conns, self._open = self._open, set()
        for conn in conns:
            conn.close()
        if self.proxied is not None:
            self.proxied.close()


class ThroughBackend:
    """Pushes through the backend's own push endpoint (same JSON body, same answers)."""

    takes_protobuf = False

    def __init__(self, client: BackendClient, path: str):
        self.client = client
        self.path = path

    def __str__(self) -> str:
        return f"{self.client.base_url}{self.path}"

    def send(self, payload: bytes, content_type: str = JSON) -> Answer:
        if content_type != JSON:
            return Answer(None, None, "the backend's push endpoint takes JSON only")
        try:
            self.client.push_logs(payload, path=self.path)
        except BackendError as exc:  # a refusal's own words (Loki's, passed on) decide what a 400 means
            return Answer(exc.status, exc.retry_after, getattr(exc, "detail", "") or str(exc))
        return Answer(204)

    def close(self) -> None:
        self.client.close()


class ViaBackend:
    """Asks the backend where to push, and asks again after any failed push."""

    def __init__(self, config: Config):
        self.config = config
        self.current: DirectLoki | ThroughBackend | None = None

    def __str__(self) -> str:
        return str(self.current) if self.current else f"{self.config.backend_url} (asking where to push)"

    @property
    def resolved(self) -> bool:
        """Whether the backend said where to push."""
        return self.current is not None

    @property
    def takes_protobuf(self) -> bool:
        """Whether the target now resolved takes Loki's protobuf (asked before each push; one lane)."""
        return self.current is not None and self.current.takes_protobuf

    def send(self, payload: bytes, content_type: str = JSON) -> Answer:
        if self.current is None:
            failure = self._resolve()
            if failure is not None:
                return failure
        assert self.current is not None
        answer = self.current.send(payload, content_type)
        if not answer.ok and answer.status not in (400, 413):
            self.close()  # re-ask before the next try: the backend may have moved us
        return answer

    def _resolve(self) -> Answer | None:
        try:
            membership = load_membership(self.config.state_path)
        except MembershipError as exc:
            return Answer(None, None, str(exc))
        if membership is None:
            return Answer(None, None, "not enrolled yet: no credential to ask the backend where to push")
        client = BackendClient(self.config, membership.credential)
        try:
            target = client.log_target()
        except BackendError as exc:
            client.close()
            return Answer(exc.status, exc.retry_after, f"asking where to push logs: {exc}")
        if target["mode"] == "loki":
            client.close()
            self.current = DirectLoki(target["url"], self.config, target.get("tenant"))
        else:
            self.current = ThroughBackend(client, target["path"])
        log.info("logs: the backend says to push to %s", self.current)
        return None

    def close(self) -> None:
        if self.current is not None:
            self.current.close()
            self.current = None


def make_target(config: Config) -> DirectLoki | ViaBackend:
    return DirectLoki(config.loki_url, config) if config.loki_url else ViaBackend(config)
