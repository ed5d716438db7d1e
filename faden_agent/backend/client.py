"""The agent's HTTP client of the backend (docs/protocol.md), on http/client.py.

Every request is bounded (REQUEST_TIMEOUT_SEC) and verifies TLS as configured; answers become
typed exceptions (Maintenance, CredentialRejected, TokenRefused, RequestRejected, BackendUnavailable).
Secrets travel in a header or the body, never in a URL, and no exception text holds them.
"""

from __future__ import annotations

import gzip as gzip_module
import logging
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

import orjson

from faden_agent import __version__, protocol
from faden_agent.common.backoff import MAX_RETRY_AFTER_S, parse_retry_after  # noqa: F401  (re-exported)
from faden_agent.config import Config, loki_tenant
from faden_agent.disk.files import replace_file
from faden_agent.http.answerbody import AnswerTooLarge, AnswerUnread
from faden_agent.http.client import Answer, HttpClient, HttpFailure, Timeout, TlsFailure
from faden_agent.http.jsonhead import HEAD_BYTES, leading_members
from faden_agent.protocol import MAX_STREAM_INFLATE_RATIO, MAX_STREAM_LINE_BYTES

log = logging.getLogger(__name__)

# A stream line longer than this is a broken or hostile server, not a command (protocol/__init__.py).
MAX_STREAM_LINE = MAX_STREAM_LINE_BYTES


class BackendError(Exception):
    """Base of every failure talking to the backend; str() is safe to log."""

    status: int | None = None
    retry_after: float | None = None


class BackendUnavailable(BackendError):
    def __init__(self, message: str, status: int | None = None, retry_after: float | None = None):
        super().__init__(message)
        self.status, self.retry_after = status, retry_after


class Maintenance(BackendUnavailable):
    """503: the backend asks us to wait `retry_after` seconds."""


class CredentialRejected(BackendError):
    def __init__(self, message: str, status: int, detail: str = ""):
        super().__init__(message)
        self.status, self.detail = status, detail

    @property
    def shared_identity(self) -> bool:
        """The backend saw two machines use this node's credential (docs/protocol.md)."""
        return self.detail.startswith("shared_identity")


class TokenRefused(BackendError):
    pass


class RequestRejected(BackendError):
    def __init__(self, message: str, status: int, detail: str = ""):
        super().__init__(message)
        self.status, self.detail = status, detail


class ProtocolError(BackendError):
    """The backend answered something this protocol version does not allow."""


DEFAULT_MAINTENANCE_WAIT_S = 30.0
MAX_ANSWER_BYTES = 4 << 20  # an uplink answer lists at most a batch's ids; enrollment is a few lines
DETAIL_BYTES = 64 << 10  # of a refusal, only its first line is shown
UPLINK_GZIP_MIN = 512  # smaller bodies gain less than gzip's own 20 bytes and the header


def _detail(reply: Answer, deadline_s: float) -> str:
    """The answer's explanation, on one line (it ends up in an error message)."""
    try:
        raw = reply.read_all(DETAIL_BYTES, deadline_s)
    except AnswerUnread as exc:
        return f"({exc})"
    try:
        body = orjson.loads(raw)
        text = str(body.get("message") or body.get("error") or "")
    except (ValueError, AttributeError):
        text = raw[:1000].decode("utf-8", "replace")
    return " ".join(text[:200].split())


class MaintenanceHold:
    """The backend's "503, retry after N s" for every thread and process of this agent, not
    only the one that heard it: the one maintenance hold. A file in the runtime directory
    holds the CLOCK_MONOTONIC time (shared by all processes, immune to wall-clock steps)
    before which no request may be sent; where it cannot be written, this process still
    remembers it."""

    _local: dict[Path, float] = {}  # path -> monotonic "not before", for this process

    def __init__(self, runtime_dir: Path):
        self.path = Path(runtime_dir) / "backend-hold"

    def remaining(self) -> float:
        try:
            until = float(self.path.read_text())
        except (OSError, ValueError):
            until = 0.0
        return max(0.0, until - time.monotonic(), self._local.get(self.path, 0.0) - time.monotonic())

    def hold(self, seconds: float) -> None:
        if seconds <= self.remaining():
            return  # a longer hold stands
        if not self.path.parent.is_dir():
            return  # no agent runtime here (e.g. `doctor` alone): each request stands alone
        until = time.monotonic() + seconds
        try:
            replace_file(self.path, repr(until).encode(), fsync=False)
        except OSError:
            self._local[self.path] = until  # a full disk: this process still waits as told


class BackendClient:
    def __init__(self, config: Config, credential: str | None = None, timeout_s: float | None = None):
        """`timeout_s`: each request's bound (REQUEST_TIMEOUT_SEC unless given)."""
        self.base_url = config.backend_url
        self.hold = MaintenanceHold(config.runtime_dir)
        self.timeout_s = config.request_timeout_sec if timeout_s is None else timeout_s
        self.verify = config.tls_verify()
        if self.verify is False:
            _warn_unverified_once(self.base_url)
        # No Accept or Connection: */* and keep-alive are HTTP/1.1's own (37 bytes a request).
        headers = {"User-Agent": f"faden-agent/{__version__}", "Accept-Encoding": "gzip, deflate"}
        if credential:
            headers["Authorization"] = f"Bearer {credential}"
        self.http = HttpClient(self.verify, headers)  # https shares the process's one TLS context (tls.py)

    def close(self) -> None:
        self.http.close()

    # ------------------------------------------------------------------ plumbing

    def _request(
        self,
        method: str,
        path: str,
        *,
        timeout: Timeout | None = None,
        auth: bool = True,
        body: bytes | None = None,
        headers: dict[str, str] | None = None,
    ) -> Answer:
        held = self.hold.remaining()
        if held > 0:  # another thread or worker was told to wait: send nothing before then
            raise Maintenance(f"{method} {path}: not sent, the backend asked to wait {held:.1f}s more", 503, held)
        where = path.split("?")[0]
        try:
            reply = self.http.request(
                method, self.base_url + path, body=body, headers=headers, timeout=timeout or self.timeout_s
            )
        except TlsFailure as exc:
            raise BackendUnavailable(f"TLS verification of {self.base_url} failed: {exc}") from None
        except HttpFailure as exc:
            raise BackendUnavailable(f"{method} {where}: {exc}") from None
        if 200 <= reply.status < 300:
            return reply
        if reply.status < 400:  # redirects are not followed: the credential goes to the URL configured only
            location = (reply.headers.get("Location") or "")[:200]
            reply.close()
            raise ProtocolError(
                f"{method} {where}: unexpected HTTP {reply.status}" + (f" (to {location})" if location else "")
            )
        self._raise_for(reply, method, where, auth)
        raise AssertionError("unreachable")

    def _raise_for(self, reply: Answer, method: str, path: str, auth: bool) -> None:
        status = reply.status
        detail = _detail(reply, self.timeout_s)
        reply.close()
        where = f"{method} {path}: HTTP {status}"
        if status == 503:
            retry_after = parse_retry_after(reply.headers.get("Retry-After"))
            wait_s = retry_after if retry_after is not None else DEFAULT_MAINTENANCE_WAIT_S
            self.hold.hold(wait_s)
            raise Maintenance(f"{where} (maintenance; retry after {wait_s:g}s)", status, wait_s)
        if status in (401, 403) and auth:
            raise CredentialRejected(
                f"{where}: the backend rejected this node's credential ({detail or 'no detail'}); "
                "the machine was removed or its credential revoked: enroll it again with a new token",
                status,
                detail,
            )
        if status in (408, 429) or status >= 500:
            raise BackendUnavailable(
                f"{where} {detail}".strip(), status, parse_retry_after(reply.headers.get("Retry-After"))
            )
        raise RequestRejected(f"{where} {detail}".strip(), status, detail)

    # ------------------------------------------------------------------ the protocol

    def enroll(self, token: str, facts: dict[str, Any]) -> dict[str, Any]:
        """Spend the one-time token; returns {"node_id", "credential", ...}."""
        try:
            body = self._json(
                "POST",
                protocol.ENROLL_PATH,
                auth=False,
                body=orjson.dumps({**facts, "token": token}),
                headers={"Content-Type": "application/json"},
            )
        except RequestRejected as exc:
            if exc.status in (401, 403):
                raise TokenRefused(f"the backend refused the enrollment token ({exc.detail or exc.status})") from None
            raise
        if not isinstance(body.get("node_id"), str) or not isinstance(body.get("credential"), str):
            raise ProtocolError("enrollment answer lacks node_id or credential")
        return body

    def open_stream(self, after: int, keepalive_sec: float) -> DownlinkStream:
        """Open the downlink; reading it raises BackendUnavailable after 3 silent keepalive periods."""
        read_timeout = stream_read_timeout(keepalive_sec)
        reply = self._request(
            "GET",
            f"{protocol.STREAM_PATH}?{urlencode({'after': after, 'keepalive': f'{keepalive_sec:g}'})}",
            timeout=(self.timeout_s, read_timeout),
            headers={"Accept-Encoding": "gzip, identity"},
        )  # what DownlinkStream inflates
        return DownlinkStream(reply)

    def post_reports(self, records: list[dict[str, Any]], gzip: bool = False) -> tuple[list[str], list[str]]:
        """Send one batch; returns (acked ids, ids the backend rejected as malformed). `gzip`:
        the backend accepts gzip bodies; a body of at least UPLINK_GZIP_MIN bytes goes gzipped."""
        data = orjson.dumps({"records": records})
        headers = {"Content-Type": "application/json"}
        if gzip and len(data) >= UPLINK_GZIP_MIN:
            data = gzip_module.compress(data, compresslevel=6)
            headers["Content-Encoding"] = "gzip"
        answer = self._json("POST", protocol.UPLINK_PATH, body=data, headers=headers)
        acked, rejected = answer.get("acked"), answer.get("rejected") or []
        if not isinstance(acked, list) or not isinstance(rejected, list):
            raise ProtocolError("uplink answer lacks an 'acked' list")
        return [str(i) for i in acked], [str(i) for i in rejected]

    def log_target(self) -> dict[str, Any]:
        """Where the log shipper pushes: {"mode": "loki", "url": ...} or {"mode": "push", "path": ...}."""
        body = self._json("GET", protocol.LOGS_TARGET_PATH)
        if body.get("mode") == "loki" and isinstance(body.get("url"), str):
            tenant = body.get("tenant")
            try:
                if tenant is not None and (not isinstance(tenant, str) or loki_tenant(tenant) != tenant):
                    raise ValueError("not a string without spaces")
            except ValueError as exc:
                raise ProtocolError(f"logs/target answer's tenant is not a Loki tenant ID: {exc}") from None
            return body
        if body.get("mode") == "push" and isinstance(body.get("path"), str):
            return body
        raise ProtocolError(f"logs/target answer has no usable mode: {str(body)[:200]}")

    def push_logs(self, body: bytes, gzip: bool = True, path: str = protocol.LOGS_PUSH_PATH) -> None:
        """One Loki push body through the backend. 400/413 raise RequestRejected (see .status)."""
        headers = {"Content-Type": "application/json"}
        if gzip:
            body = gzip_module.compress(body, compresslevel=5)
            headers["Content-Encoding"] = "gzip"
        self._body("POST", path, body=body, headers=headers)

    def _json(self, method: str, path: str, **kwargs: Any) -> dict[str, Any]:
        try:
            body = orjson.loads(self._body(method, path, **kwargs))
        except orjson.JSONDecodeError:
            raise ProtocolError(f"answer to {method} {path.split('?')[0]} is not JSON") from None
        if not isinstance(body, dict):
            raise ProtocolError("answer is not a JSON object")
        return body

    def _body(self, method: str, path: str, **kwargs: Any) -> bytes:
        """A 2xx answer's body, read to its end (the connection is kept for the next request)."""
        reply = self._request(method, path, **kwargs)
        where = f"answer to {method} {path.split('?')[0]}"
        try:
            with reply:
                return reply.read_all(MAX_ANSWER_BYTES, self.timeout_s)
        except AnswerTooLarge as exc:
            raise ProtocolError(f"{where}: {exc}") from None
        except AnswerUnread as exc:
            raise BackendUnavailable(f"{where}: {exc}") from None


_unverified_warned = False


def _warn_unverified_once(base_url: str) -> None:
    """One clear line, once a process."""
    global _unverified_warned
    if _unverified_warned:
        return
    _unverified_warned = True
    log.warning(
        "TLS verification of %s is OFF (FADEN_NODE_AGENT_VERIFY_TLS=false): anyone on the path "
        "can impersonate the backend",
        base_url,
    )


def stream_read_timeout(keepalive_sec: float) -> float:
    """A stream silent for three keepalive periods (plus slack) is dead."""
    return 3 * keepalive_sec + 1.0


class DownlinkStream:
    """The NDJSON lines of one open stream, decoded; BackendUnavailable when it breaks.

    Read incrementally whatever the framing (chunked, Content-Length, close-delimited) and
    encoding (gzip, deflate): each read returns what has arrived, at most READ_BYTES, so a
    command is handled as soon as its line is complete, never when the answer ends. A line
    over MAX_STREAM_LINE is not buffered: it is skipped to its newline (logged), and one
    that runs on past MAX_SKIP_BYTES ends the stream; an answer that inflates more than
    MAX_STREAM_INFLATE_RATIO times is a gzip bomb and ends it too. Of a skipped line only
    its first HEAD_BYTES are kept: when they name a command (type, id and seq come first),
    it is yielded as {type, id, seq, kind, too_large: <bytes>}, so the executor ends it
    rejected/too_large and the backend sees a terminal state, as for any command too big."""

    READ_BYTES = 64 * 1024
    MAX_SKIP_BYTES = 16 * MAX_STREAM_LINE

    def __init__(self, reply: Answer):
        self.reply = reply
        self.skipped_lines = 0
        self._decoded = 0

    def _chunks(self) -> Iterator[bytes]:
        reply = self.reply
        encoding = reply.headers.get("Content-Encoding", "identity").strip().lower()
        if encoding not in ("", "identity", "gzip", "x-gzip", "deflate"):
            raise ProtocolError(f"stream has an unknown Content-Encoding {encoding[:40]!r}")
        while True:
            data = reply.read1(self.READ_BYTES)  # inflates at most READ_BYTES a call
            if not data:
                return
            self._decoded += len(data)
            if self._decoded > MAX_STREAM_LINE and self._decoded > MAX_STREAM_INFLATE_RATIO * max(reply.raw_bytes, 1):
                raise ProtocolError(
                    f"stream inflates {self._decoded} bytes from {reply.raw_bytes}: refused as a gzip bomb"
                )
            yield data

    def _lines(self) -> Iterator[bytes]:
        """The raw lines, each at most MAX_STREAM_LINE bytes; longer ones skipped unbuffered
        (in their place: the short line _skip makes of a command they name)."""
        pending = bytearray()
        skipping: bytes | None = None  # the head of a line being skipped
        skipped = 0
        for chunk in self._chunks():
            start = 0
            while True:
                end = chunk.find(b"\n", start)
                piece = chunk[start:] if end < 0 else chunk[start:end]
                if skipping is not None:
                    skipped += len(piece)
                    if skipped > self.MAX_SKIP_BYTES:
                        over_cap = self._skip(skipping, skipped)
                        if over_cap is not None:  # answered before the reconnect, or it comes again and again
                            yield over_cap
                        raise ProtocolError(f"stream line runs on past {self.MAX_SKIP_BYTES} bytes: {skipping[:80]!r}")
                elif len(pending) + len(piece) > MAX_STREAM_LINE:
                    skipping = bytes(pending[:HEAD_BYTES]) + piece[: max(0, HEAD_BYTES - len(pending))]
                    skipped = len(pending) + len(piece)
                    pending.clear()
                else:
                    pending += piece
                if end < 0:
                    break
                if skipping is not None:
                    over_cap = self._skip(skipping, skipped)
                    skipping = None
                    if over_cap is not None:
                        yield over_cap
                else:
                    yield bytes(pending)
                    pending.clear()
                start = end + 1
        if pending and skipping is None:
            yield bytes(pending)

    def _skip(self, head: bytes, size: int) -> bytes | None:
        """Count and log a line over the cap; the short line {type, id, seq, kind, too_large}
        when its beginning names a command (checked like any command by the downlink)."""
        self.skipped_lines += 1
        fields = leading_members(head)
        if fields.get("type") == "command" and "id" in fields and "seq" in fields:
            log.error(
                "downlink: command %.200r (seq %.40r) is on a stream line of %d bytes (over %d): not read, "
                "reported rejected/too_large",
                fields["id"],
                fields["seq"],
                size,
                MAX_STREAM_LINE,
            )
            over_cap = {"type": "command", "id": fields["id"], "seq": fields["seq"], "too_large": size}
            return orjson.dumps({**over_cap, "kind": fields.get("kind", "")})
        log.error(
            "downlink: skipped a stream line of %d bytes (over %d), no command id and seq among the members in "
            "its first %d bytes: %r...",
            size,
            MAX_STREAM_LINE,
            HEAD_BYTES,
            head[:80],
        )
        return None

    def __iter__(self) -> Iterator[dict[str, Any]]:
        try:
            for line in self._lines():
                if not line.strip():
                    continue
                try:
                    message = orjson.loads(line)
                except orjson.JSONDecodeError:
                    raise ProtocolError(f"stream line is not JSON: {line[:80]!r}") from None
                if not isinstance(message, dict) or not isinstance(message.get("type"), str):
                    raise ProtocolError(f"stream line has no type: {line[:80]!r}")
                yield message
        except HttpFailure as exc:
            raise BackendUnavailable(f"stream broke: {exc}") from None
        finally:
            self.reply.close()
        raise BackendUnavailable("stream ended by the backend")

    def close(self) -> None:
        self.reply.close()
