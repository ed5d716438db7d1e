"""The agent's HTTP/1.1 client on http.client: a kept-alive connection per thread and origin,
TLS through tls.py's one context (taken at the first https request), proxies from the
environment (proxies.py; CONNECT for https), each socket read bounded by the read timeout.
An Answer streams its body decoded (gzip, deflate) and is the caller's to read and close.
Failures are HttpFailure (TlsFailure: the certificate), with no header or password in their text."""

from __future__ import annotations

import contextlib
import http.client
import select
import socket
import ssl
import threading
import zlib
from typing import Any
from urllib.parse import urlsplit

from faden_agent.common.errorline import error_line
from faden_agent.http import proxies
from faden_agent.http.answerbody import READ_BYTES, AnswerUnread, read_within
from faden_agent.http.tls import client_context

_BROKEN = (OSError, http.client.HTTPException, zlib.error)  # an answer cut or garbled


class HttpFailure(Exception):
    """The request could not be sent or its answer not read; str() names the cause."""


class TlsFailure(HttpFailure):
    """The server's certificate was not trusted (or TLS could not be set up)."""


class HttpTimeout(HttpFailure):
    """No answer (or no more of it) within the read or connect bound."""


def failure_from(exc: BaseException) -> HttpFailure:
    """The HttpFailure that says exc ('TypeName: text', the innermost cause's text)."""
    kind = HttpTimeout if isinstance(exc, TimeoutError) else HttpFailure
    if isinstance(exc, ssl.SSLError):
        kind = TlsFailure
    return kind(f"{type(exc).__name__}: {error_line(exc, root=True)}")


class _Inflater:
    """Content-Encoding gzip or deflate (zlib-wrapped or raw), at most `limit` bytes a call."""

    def __init__(self, encoding: str):
        self._gzip = encoding in ("gzip", "x-gzip")
        self._engine = zlib.decompressobj(16 + zlib.MAX_WBITS if self._gzip else zlib.MAX_WBITS)
        self._started = False

    @property
    def pending(self) -> bytes:
        return self._engine.unconsumed_tail

    def inflate(self, data: bytes, limit: int) -> bytes:
        try:
            out = self._engine.decompress(data, limit)
        except zlib.error:
            if self._gzip or self._started:
                raise
            self._engine = zlib.decompressobj(-zlib.MAX_WBITS)  # "deflate" sent raw, as many servers do
            out = self._engine.decompress(data, limit)
        self._started = True
        return out


class Answer:
    """One answer: status, headers (case-insensitive), the body by read1(); closing it before
    its end drops the connection, reading it to its end gives the connection back."""

    def __init__(self, response: http.client.HTTPResponse, done: Any, sock: socket.socket | None = None):
        self.status = response.status
        self.headers = response.headers
        self._response = response
        self._sock = sock  # for abort()
        self._done = done  # called with True (reusable) or False once, at the end or the close
        self.raw_bytes = 0  # body bytes as sent (before inflating)
        encoding = (response.getheader("Content-Encoding") or "").strip().lower()
        self._inflater = _Inflater(encoding) if encoding in ("gzip", "x-gzip", "deflate") else None

    def read1(self, size: int = READ_BYTES) -> bytes:
        """What has arrived (decoded), at most size bytes; b"" at the body's end."""
        try:
            return self._read1(size)
        except _BROKEN as exc:
            self.close()
            raise failure_from(exc) from None

    def _read1(self, size: int) -> bytes:
        while True:
            if self._inflater is not None and self._inflater.pending:
                return self._inflater.inflate(self._inflater.pending, size)
            raw = self._response.read1(size) if self._done is not None else b""
            self.raw_bytes += len(raw)
            if not raw:
                self._finish(True)
                return b""
            if self._inflater is None:
                return raw
            out = self._inflater.inflate(raw, size)
            if out:
                return out

    def read_all(self, max_bytes: int, deadline_s: float) -> bytes:
        """The whole (decoded) body (answerbody.py's bounds), or AnswerUnread: the answer closed then."""
        try:
            return read_within(self._read1, max_bytes, deadline_s, _BROKEN)
        except AnswerUnread:
            self.close()
            raise

    def _finish(self, reusable: bool) -> None:
        done, self._done = self._done, None
        if done is not None:
            self._response.close()  # its reader only (http.client keeps a read-to-its-end one open)
            done(reusable and not self._response.will_close)

    def close(self) -> None:
        if self._done is not None:
            self._finish(False)

    def abort(self) -> None:
        """From any thread: ends a read blocked on this answer (it then sees the body end)."""
        if self._done is not None and self._sock is not None:  # not once its connection went back
            try:
                self._sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    def __enter__(self) -> Answer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class _Timed:
    """http.client's connect, then the socket's timeout set to the read bound."""

    read_timeout: float | None = None
    sock: Any

    def connect(self) -> None:
        super().connect()  # type: ignore[misc]
        self.sock.settimeout(self.read_timeout)
        if self.sock.family != socket.AF_UNIX:
            self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)


class _HTTP(_Timed, http.client.HTTPConnection):
    pass


class _HTTPS(_Timed, http.client.HTTPSConnection):
    pass


class _Unix(_Timed, http.client.HTTPConnection):
    """HTTP over a Unix socket (a local Docker engine); the Host header says "localhost"."""

    def __init__(self, path: str, timeout: float | None):
        super().__init__("localhost", timeout=timeout)
        self.path = path

    def connect(self) -> None:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            sock.settimeout(self.timeout)
            sock.connect(self.path)
        except BaseException:
            sock.close()
            raise
        self.sock = sock
        sock.settimeout(self.read_timeout)


def _dropped(conn: http.client.HTTPConnection) -> bool:
    """Whether an idle kept-alive connection was closed by its server (readable = EOF or junk)."""
    sock = conn.sock
    if sock is None:
        return False
    try:
        return bool(select.select([sock], [], [], 0)[0])
    except (OSError, ValueError):
        return True


Timeout = float | tuple[float, float | None]  # both bounds, or (connect, read: None waits without end)


class HttpClient:
    """Requests to any origin; `verify` as Config.tls_verify() gives it; `headers` go with
    every request (a request's own win); `unix_socket`: every request goes to that socket."""

    def __init__(
        self,
        verify: bool | str = True,
        headers: dict[str, str] | None = None,
        unix_socket: str = "",
        context: ssl.SSLContext | None = None,
    ):
        self.verify = verify
        self.context = context  # in place of tls.py's shared one (an engine's client certificate)
        self.headers = dict(headers or {})
        self.unix_socket = unix_socket
        self._kept: dict[threading.Thread, dict[Any, Any]] = {}  # each thread's idle connections, by origin
        self._open: set[http.client.HTTPConnection] = set()
        self._lock = threading.Lock()

    def request(
        self,
        method: str,
        url: str,
        *,
        body: bytes | None = None,
        headers: dict[str, str] | None = None,
        timeout: Timeout,
    ) -> Answer:
        """Send one request and read the answer's head; HttpFailure when either fails."""
        connect_s, read_s = timeout if isinstance(timeout, tuple) else (timeout, timeout)
        try:
            parts = urlsplit(url)
            port = parts.port or (443 if parts.scheme == "https" else 80)
        except ValueError:
            raise HttpFailure(f"{url.split('?')[0][:200]!r} is not a URL with a valid port") from None
        if parts.scheme not in ("http", "https") or not (parts.hostname or self.unix_socket):
            raise HttpFailure(f"{parts.scheme}:// is not an http or https URL")
        path = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
        proxy = None if self.unix_socket else self._proxy(parts.scheme, parts.hostname or "", port)
        if proxy is not None and parts.scheme == "http":
            path = f"http://{parts.netloc.rpartition('@')[2]}{path}"  # a proxy takes the whole URL
        key = (parts.scheme, parts.hostname, port, proxy)
        conn = self._take(key) or self._connection(parts.scheme, parts.hostname or "", port, proxy, connect_s)
        conn.read_timeout = read_s
        if conn.sock is not None:
            conn.sock.settimeout(read_s)
        sent = {**self.headers, **(headers or {})}
        if proxy is not None and proxy.authorization and parts.scheme == "http":
            sent["Proxy-Authorization"] = proxy.authorization
        try:
            conn.request(method, path, body, sent)
            sock = conn.sock
            response = conn.getresponse()
        except (OSError, http.client.HTTPException, ValueError) as exc:  # ValueError: a header http.client refuses
            self._forget(conn)
            raise failure_from(exc) from exc  # the cause: a PermissionError on a socket is told apart
        return Answer(response, lambda reusable: self._give_back(key, conn) if reusable else self._forget(conn), sock)

    def _proxy(self, scheme: str, host: str, port: int) -> proxies.Proxy | None:
        try:
            return proxies.proxy_for(scheme, host, port)
        except proxies.ProxyError as exc:
            raise HttpFailure(str(exc)) from None

    def _connection(
        self, scheme: str, host: str, port: int, proxy: proxies.Proxy | None, connect_s: float
    ) -> _HTTP | _HTTPS | _Unix:
        conn: _HTTP | _HTTPS | _Unix
        if self.unix_socket:
            conn = _Unix(self.unix_socket, connect_s)
        elif scheme == "https":
            try:
                context = self.context or client_context(self.verify)
            except (OSError, ssl.SSLError) as exc:  # a CA bundle that cannot be loaded: the next request tries again
                raise TlsFailure(f"the CA bundle cannot be loaded: {error_line(exc, root=True)}") from None
            if proxy is None:
                conn = _HTTPS(host, port, timeout=connect_s, context=context)
            else:
                conn = _HTTPS(proxy.host, proxy.port, timeout=connect_s, context=context)
                tunnel = {"Proxy-Authorization": proxy.authorization} if proxy.authorization else None
                conn.set_tunnel(host, port, headers=tunnel)
        elif proxy is not None:
            conn = _HTTP(proxy.host, proxy.port, timeout=connect_s)
        else:
            conn = _HTTP(host, port, timeout=connect_s)
        with self._lock:
            self._open.add(conn)
        return conn

    def _connections(self) -> dict[Any, Any]:
        """This thread's kept connections; a thread's first use closes those of threads that ended."""
        me = threading.current_thread()
        with self._lock:
            kept = self._kept.get(me)
            if kept is None:
                for thread in [thread for thread in self._kept if not thread.is_alive()]:
                    for conn in self._kept.pop(thread).values():
                        conn.close()
                        self._open.discard(conn)
                kept = self._kept[me] = {}
        return kept

    def _take(self, key: Any) -> Any:
        conn = self._connections().pop(key, None)
        if conn is not None and _dropped(conn):
            self._forget(conn)
            return None
        if conn is not None:
            with self._lock:
                self._open.add(conn)  # again, after a close() from any thread
        return conn

    def _give_back(self, key: Any, conn: http.client.HTTPConnection) -> None:
        kept = self._connections()
        if key in kept:  # this thread opened a second one meanwhile: one kept per origin
            self._forget(conn)
        else:
            kept[key] = conn

    def _forget(self, conn: http.client.HTTPConnection) -> None:
        conn.close()
        with self._lock:
            self._open.discard(conn)

    def close(self) -> None:
        """From any thread: closes every idle connection (a later request opens another) and
        shuts down those an answer is being read from (its reader then sees the end and
        closes it: closing it here would wait on the reader's lock)."""
        with self._lock:
            idle = [conn for kept in self._kept.values() for conn in kept.values()]
            busy = self._open.difference(idle)
            for kept in self._kept.values():
                kept.clear()
            self._open = busy
        for conn in idle:
            conn.close()
        for conn in busy:
            with contextlib.suppress(OSError, AttributeError):  # closed meanwhile by its reader
                conn.sock.shutdown(socket.SHUT_RDWR)
