"""A Loki-compatible push receiver for tests: a real HTTP server following Loki's documented
push API (POST /loki/api/v1/push: JSON, optional gzip; or protobuf, snappy) and its limits:

- 204 on success;
- as strict as Loki 2.8 by default (`version="2.8"`): a value with a third element
  (structured metadata) makes it refuse the WHOLE push with Loki 2.8's own decode error;
  `version="3"` takes the 3.x form, or refuses it per stream with Loki 3.x's "disallowed"
  text when `allow_structured_metadata=False`;
- 400 for a bad body or bad entries (too old, too far in the future, line too long, bad
  labels), in Loki's own words; like Loki, the valid entries of such a push ARE stored
  and only the bad ones are named in the answer;
- 413 when the (decompressed) body exceeds max_body_bytes; 415 for other content types;
- switchable failure modes: "ok", "throttle" (429 + Retry-After), "error" (a 5xx), and
  down()/up() to stop and resume listening on the same port.

It records what it accepted, in order, duplicates included (Loki would drop exact
duplicates; tests check that duplicates are exact). Use it in a thread:

    with LokiReceiver() as loki:             # .url -> http://127.0.0.1:PORT
        loki.set_mode("throttle", retry_after=1)
        loki.wait_for(lambda entries: len(entries) >= 10)

or as a process (`python -m tests.support.lokireceiver --port P [--record FILE]`), controlled over
HTTP with ReceiverClient(url): POST /receiver/mode {"mode", "retry_after", "status"},
GET /receiver/entries, GET /receiver/stats. The same endpoints exist in thread mode.
"""

from __future__ import annotations

import argparse
import re
import threading
import time
import zlib
from collections.abc import Callable
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import orjson

from tests.support.lokiprotodecode import decode_push

PUSH_PATH = "/loki/api/v1/push"
LABEL_NAME = re.compile(r"[a-zA-Z_][a-zA-Z0-9_]*\Z")
MODES = ("ok", "throttle", "error")
VERSIONS = ("2.8", "3")
# Loki 2.8.0's answer to a value with a third element (read from the real binary).
LOKI_28_DECODE_ERROR = (
    "loghttp.PushRequest.Streams: []*loghttp.Stream: unmarshalerDecoder: Value is string, "
    "but can't find closing '\"' symbol, error found in #10 byte of ...|{value:.20}|..."
)


@dataclass(frozen=True)
class Accepted:
    labels: dict[str, str]
    ts: str  # nanoseconds, as sent
    line: str
    metadata: dict[str, str] | None

    @property
    def stream(self) -> tuple[tuple[str, str], ...]:
        return tuple(sorted(self.labels.items()))

    def key(self) -> tuple[Any, ...]:
        """What makes two entries exact duplicates for Loki: stream, timestamp, line."""
        return (self.stream, self.ts, self.line)

    def as_json(self) -> dict[str, Any]:
        return {"labels": self.labels, "ts": self.ts, "line": self.line, "metadata": self.metadata}


class LokiReceiver:
    def __init__(
        self,
        host: str = "127.0.0.1",
        port: int = 0,
        *,
        max_body_bytes: int = 4 * 1024 * 1024,
        max_line_bytes: int = 256 * 1024,
        reject_older_than_s: float = 7 * 86400,
        creation_grace_s: float = 600,
        version: str = "2.8",
        allow_structured_metadata: bool = True,
        record_path: str | None = None,
    ):
        if version not in VERSIONS:
            raise ValueError(f"version must be one of {VERSIONS}")
        self.version = version
        self.host, self.port = host, port
        self.max_body_bytes = max_body_bytes
        self.max_line_bytes = max_line_bytes
        self.reject_older_than_s = reject_older_than_s
        self.creation_grace_s = creation_grace_s
        self.allow_structured_metadata = allow_structured_metadata
        self.record_path = record_path
        self.mode, self.retry_after, self.error_status = "ok", 1.0, 500
        self.delay_s = 0.0  # answer every push this much later (a slow Loki)
        self._entries: list[Accepted] = []
        self.statuses: dict[int, int] = {}
        self.pushes = 0
        self.protobuf_pushes = 0
        self._lock = threading.Condition()
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    # ------------------------------------------------------------------ lifecycle

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    def start(self) -> LokiReceiver:
        self._server = _Server((self.host, self.port), _Handler)
        self._server.receiver = self
        self.port = self._server.server_address[1]
        self._thread = threading.Thread(target=self._server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None

    def down(self) -> None:
        """Stop listening: pushes get connection refused."""
        self.stop()

    def up(self) -> None:
        """Listen again on the same port."""
        if self._server is None:
            self.start()

    def __enter__(self) -> LokiReceiver:
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.stop()

    # ------------------------------------------------------------------ control and results

    def set_mode(self, mode: str, retry_after: float | None = None, status: int | None = None) -> None:
        if mode not in MODES:
            raise ValueError(f"mode must be one of {MODES}")
        with self._lock:
            self.mode = mode
            if retry_after is not None:
                self.retry_after = retry_after
            if status is not None:
                self.error_status = status

    def entries(self) -> list[Accepted]:
        with self._lock:
            return list(self._entries)

    def clear(self) -> None:
        with self._lock:
            self._entries.clear()

    def wait_for(self, predicate: Callable[[list[Accepted]], Any], timeout_s: float = 30.0) -> Any:
        """Wait until predicate(entries) is true; raises AssertionError on timeout."""
        deadline = time.monotonic() + timeout_s
        with self._lock:
            while True:
                result = predicate(self._entries)
                if result:
                    return result
                left = deadline - time.monotonic()
                if left <= 0:
                    raise AssertionError(
                        f"receiver: condition not met within {timeout_s}s "
                        f"({len(self._entries)} entries, statuses {self.statuses})"
                    )
                self._lock.wait(min(left, 0.2))

    def stats(self) -> dict[str, Any]:
        with self._lock:
            return {
                "entries": len(self._entries),
                "pushes": self.pushes,
                "statuses": dict(self.statuses),
                "mode": self.mode,
            }

    # ------------------------------------------------------------------ the push API

    def handle_push(self, headers: Any, raw: bytes) -> tuple[int, dict[str, str], bytes]:
        if self.delay_s:
            time.sleep(self.delay_s)
        with self._lock:
            mode, retry_after, error_status = self.mode, self.retry_after, self.error_status
        if mode == "throttle":
            return 429, {"Retry-After": f"{retry_after:g}"}, b"Ingestion rate limit exceeded\n"
        if mode == "error":
            return error_status, {}, b"internal error\n"
        content_type = (headers.get("Content-Type") or "").split(";")[0].strip()
        if content_type == "application/x-protobuf":
            with self._lock:
                self.protobuf_pushes += 1
            return self._take(headers, raw, protobuf=True)
        if content_type != "application/json":
            return 415, {}, b"unsupported Content-Type (this receiver speaks JSON and protobuf)\n"
        return self._take(headers, raw, protobuf=False)

    def _take(self, headers: Any, raw: bytes, protobuf: bool) -> tuple[int, dict[str, str], bytes]:
        if protobuf:  # Loki 2.8's gogo decoder skips the unknown metadata field without a word
            try:
                payload = decode_push(raw, self.max_body_bytes, keep_metadata=self.version != "2.8")
            except ValueError as exc:
                return 400, {}, f"error parsing push request: {exc}\n".encode()
            if payload is None:
                return 413, {}, f"request body too large (limit {self.max_body_bytes} bytes)\n".encode()
            return self._store(payload)
        body = raw
        if (headers.get("Content-Encoding") or "").lower() == "gzip":
            try:
                body = _gunzip(raw, self.max_body_bytes)
            except (OSError, EOFError, zlib.error):
                return 400, {}, b"invalid gzip body\n"
        if body is None or len(body) > self.max_body_bytes:
            return 413, {}, f"request body too large (limit {self.max_body_bytes} bytes)\n".encode()
        try:
            payload = orjson.loads(body)
        except orjson.JSONDecodeError as exc:
            return 400, {}, f"error parsing push request: {exc}\n".encode()
        return self._store(payload)

    def _store(self, payload: Any) -> tuple[int, dict[str, str], bytes]:
        try:
            accepted, errors = self._validate(payload)
        except _WholePushRefused as exc:
            return 400, {}, f"{exc}\n".encode()
        except (orjson.JSONDecodeError, ValueError, TypeError, AttributeError, KeyError) as exc:
            return 400, {}, f"error parsing push request: {exc}\n".encode()
        with self._lock:
            self._entries.extend(accepted)
            self._lock.notify_all()
        if self.record_path and accepted:
            with open(self.record_path, "ab") as fh:
                fh.write(b"".join(orjson.dumps(a.as_json()) + b"\n" for a in accepted))
        if errors:  # Loki names one bad entry (the last) and stores the rest
            return 400, {}, f"{errors[-1]}\n".encode()
        return 204, {}, b""

    def _validate(self, payload: Any) -> tuple[list[Accepted], list[str]]:
        now_ns = time.time_ns()
        oldest = now_ns - int(self.reject_older_than_s * 1e9)
        newest = now_ns + int(self.creation_grace_s * 1e9)
        accepted, errors = [], []
        for stream in payload["streams"]:
            labels = stream["stream"]
            if not isinstance(labels, dict) or not labels:
                raise ValueError("at least one label pair is required per stream")
            for name, value in labels.items():
                if not LABEL_NAME.match(name) or not isinstance(value, str):
                    raise ValueError(f"invalid label {name!r}={value!r}")
            selector = _selector(labels)
            for value in stream["values"]:
                if not isinstance(value, list) or len(value) not in (2, 3):
                    raise ValueError(f"an entry must be [ts, line] or [ts, line, metadata], got {value!r:.100}")
                ts, line = value[0], value[1]
                if not isinstance(ts, str) or not ts.isdigit() or not isinstance(line, str):
                    raise ValueError(f"timestamp must be a string of nanoseconds, got {ts!r:.40}")
                metadata = value[2] if len(value) == 3 else None
                if metadata is not None:
                    if self.version == "2.8":
                        raise _WholePushRefused(LOKI_28_DECODE_ERROR.format(value=orjson.dumps(metadata).decode()))
                    if not isinstance(metadata, dict) or not all(isinstance(v, str) for v in metadata.values()):
                        raise ValueError("structured metadata must be an object of strings")
                    if not self.allow_structured_metadata:
                        errors.append(
                            f"stream '{selector}' includes structured metadata, but this feature is disallowed. "
                            "Please see `limits_config.allow_structured_metadata` or contact your Loki "
                            "administrator to enable it."
                        )
                        continue
                ts_ns = int(ts)
                if ts_ns < oldest:
                    errors.append(
                        f"entry for stream '{selector}' has timestamp too old: {_rfc3339(ts_ns)}, "
                        f"oldest acceptable timestamp is: {_rfc3339(oldest)}"
                    )
                elif ts_ns > newest:
                    errors.append(f"entry for stream '{selector}' has timestamp too new: {_rfc3339(ts_ns)}")
                elif len(line) * 4 > self.max_line_bytes and len(line.encode()) > self.max_line_bytes:
                    errors.append(
                        f"Max entry size '{self.max_line_bytes}' bytes exceeded for stream '{selector}' "
                        f"while adding an entry with length '{len(line.encode())}' bytes"
                    )
                else:
                    accepted.append(Accepted(labels, ts, line, metadata))
        return accepted, errors


class _WholePushRefused(ValueError):
    """A body Loki cannot take at all: 400 with exactly this text, nothing stored."""


def _rfc3339(ts_ns: int) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(ts_ns / 1e9))


def _selector(labels: dict[str, str]) -> str:
    return "{" + ", ".join(f'{k}="{v}"' for k, v in sorted(labels.items())) + "}"


def _gunzip(raw: bytes, limit: int) -> bytes | None:
    """Decompress at most limit+1 bytes (a gzip bomb stays a 413, not an OOM)."""
    out = zlib.decompressobj(16 + zlib.MAX_WBITS).decompress(raw, limit + 1)
    return None if len(out) > limit else out


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True
    receiver: LokiReceiver


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: _Server

    def log_message(self, *args: Any) -> None:
        pass

    def _answer(self, status: int, headers: dict[str, str], body: bytes) -> None:
        self.send_response(status)
        for name, value in headers.items():
            self.send_header(name, value)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_POST(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length)
        receiver = self.server.receiver
        if self.path == PUSH_PATH:
            status, headers, body = receiver.handle_push(self.headers, raw)
            with receiver._lock:  # only pushes count, not the control endpoints
                receiver.pushes += 1
                receiver.statuses[status] = receiver.statuses.get(status, 0) + 1
            return self._answer(status, headers, body)
        if self.path == "/receiver/mode":
            body = orjson.loads(raw or b"{}")
            receiver.set_mode(body.get("mode", "ok"), body.get("retry_after"), body.get("status"))
            return self._answer(204, {}, b"")
        self._answer(404, {}, b"not found\n")

    def do_GET(self) -> None:
        receiver = self.server.receiver
        if self.path == "/receiver/entries":
            return self._answer(
                200, {"Content-Type": "application/json"}, orjson.dumps([a.as_json() for a in receiver.entries()])
            )
        if self.path in ("/receiver/stats", "/ready"):
            return self._answer(
                200,
                {"Content-Type": "application/json"},
                orjson.dumps(receiver.stats(), option=orjson.OPT_NON_STR_KEYS),
            )
        self._answer(404, {}, b"not found\n")


class ReceiverClient:
    """Control a receiver running in another process (`python -m tests.support.lokireceiver`)."""

    def __init__(self, url: str):
        self.url = url.rstrip("/")

    def set_mode(self, mode: str, retry_after: float | None = None, status: int | None = None) -> None:
        import requests

        requests.post(
            f"{self.url}/receiver/mode",
            timeout=5,
            data=orjson.dumps({"mode": mode, "retry_after": retry_after, "status": status}),
        ).raise_for_status()

    def entries(self) -> list[Accepted]:
        import requests

        reply = requests.get(f"{self.url}/receiver/entries", timeout=30)
        reply.raise_for_status()
        return [Accepted(e["labels"], e["ts"], e["line"], e["metadata"]) for e in reply.json()]

    def stats(self) -> dict[str, Any]:
        """Like LokiReceiver.stats(); the status keys come back as strings ("204")."""
        import requests

        return requests.get(f"{self.url}/receiver/stats", timeout=5).json()


def main() -> None:
    parser = argparse.ArgumentParser(description="Loki-compatible push receiver for tests")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--record", help="append accepted entries to this file as JSON lines")
    parser.add_argument("--max-body-bytes", type=int, default=4 * 1024 * 1024)
    parser.add_argument("--loki-version", choices=VERSIONS, default="2.8", help="whose push format to take")
    args = parser.parse_args()
    receiver = LokiReceiver(
        args.host, args.port, max_body_bytes=args.max_body_bytes, version=args.loki_version, record_path=args.record
    ).start()
    print(receiver.url, flush=True)
    try:
        threading.Event().wait()
    except KeyboardInterrupt:
        receiver.stop()


if __name__ == "__main__":
    main()
