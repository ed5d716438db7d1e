"""The client TLS context: one per trust setting and process, shared by every connection
the agent opens (requests' sessions through SharedContextAdapter, and its own sockets).
Trust: CA_BUNDLE when set, else the system's store (SSL_CERT_FILE/SSL_CERT_DIR, else the
distributions' bundle), else certifi's.
"""

from __future__ import annotations

import os
import ssl
import threading
from typing import Any

from requests.adapters import HTTPAdapter
from requests.exceptions import SSLError
from requests.utils import DEFAULT_CA_BUNDLE_PATH

_contexts: dict[bool | str, ssl.SSLContext] = {}
_lock = threading.Lock()
# Where distributions keep the system's CA bundle (the list Go's crypto/x509 reads): the
# standalone binary's own OpenSSL was built for one distribution's paths, not the host's.
SYSTEM_BUNDLES = (
    "/etc/ssl/certs/ca-certificates.crt",  # Debian, Ubuntu, Gentoo, Arch
    "/etc/pki/tls/certs/ca-bundle.crt",  # Fedora, RHEL 6
    "/etc/ssl/ca-bundle.pem",  # openSUSE
    "/etc/pki/tls/cacert.pem",  # OpenELEC
    "/etc/pki/ca-trust/extracted/pem/tls-ca-bundle.pem",  # CentOS, RHEL 7+
    "/etc/ssl/cert.pem",  # Alpine
)
SYSTEM_DIRS = ("/etc/ssl/certs", "/etc/pki/tls/certs")


def client_context(verify: bool | str) -> ssl.SSLContext:
    """`verify` as Config.tls_verify() gives it: False (no checks), True (requests' CA
    bundle), or the path of a CA bundle. Built once per value and process."""
    with _lock:
        context = _contexts.get(verify)
        if context is None:
            context = _contexts[verify] = _build(verify)
        return context


def _build(verify: bool | str) -> ssl.SSLContext:
    if verify is False:
        context = ssl.create_default_context()
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
        return context
    if isinstance(verify, str):
        return ssl.create_default_context(cafile=verify)
    cafile, capath = system_store() or (DEFAULT_CA_BUNDLE_PATH, None)
    return ssl.create_default_context(cafile=cafile, capath=capath)


def system_store() -> tuple[str | None, str | None] | None:
    """(CA file, CA directory) of the system's trust store, as OpenSSL, Go and curl find it:
    SSL_CERT_FILE / SSL_CERT_DIR when set, else the first bundle of SYSTEM_BUNDLES, else a
    directory of hashed certificates; None when the host has none (then certifi's)."""
    cafile = os.environ.get("SSL_CERT_FILE", "")
    capath = os.environ.get("SSL_CERT_DIR", "")
    named = (
        cafile if os.path.isfile(cafile) else None,
        capath if any(os.path.isdir(part) for part in capath.split(":")) else None,
    )
    if named != (None, None):
        return named
    for bundle in SYSTEM_BUNDLES:
        if os.path.isfile(bundle) and os.path.getsize(bundle) > 0:
            return bundle, None
    for directory in SYSTEM_DIRS:
        if os.path.isdir(directory) and any(name.endswith(".0") for name in os.listdir(directory)):
            return None, directory
    return None


def trust_words(verify: bool | str) -> str:
    """What `verify` trusts, for doctor and error lines: a CA bundle, the system's store, certifi's."""
    if verify is False:
        return "nothing (verification off)"
    if isinstance(verify, str):
        return f"CA bundle {verify}"
    store = system_store()
    return f"the system's trust store ({store[0] or store[1]})" if store else "the public CA bundle (certifi)"


class SharedContextAdapter(HTTPAdapter):
    """requests' adapter that hands urllib3 the process's one context for `verify` and no
    CA path, so a new connection neither builds a context nor parses the bundle again. The
    context is taken at the first https request, not before: a session that only speaks
    http (a backend or Loki on plain http) never parses a bundle (16 ms, 1.6 MiB a worker).
    The session must pass the same `verify` with each request (BackendClient does: a
    session's own verify loses to REQUESTS_CA_BUNDLE)."""

    def __init__(self, verify: bool | str):
        self._verify = verify
        self._context: ssl.SSLContext | None = None
        self._first_use = threading.Lock()
        super().__init__()

    def send(self, request: Any, *args: Any, **kwargs: Any) -> Any:
        if self._context is None:
            with self._first_use:
                if self._context is None:
                    try:
                        context = client_context(self._verify)
                    except ssl.SSLError as exc:  # as requests' own adapter says it; the next request tries again
                        raise SSLError(exc, request=request) from exc
                    self._context = context
                    self.poolmanager.connection_pool_kw["ssl_context"] = context
        return super().send(request, *args, **kwargs)

    def proxy_manager_for(self, proxy: str, **proxy_kwargs: Any) -> Any:
        return super().proxy_manager_for(proxy, ssl_context=self._context, **proxy_kwargs)

    def cert_verify(self, conn: Any, url: str, verify: Any, cert: Any) -> None:
        # requests puts REQUESTS_CA_BUNDLE / CURL_CA_BUNDLE from the environment in place of a
        # request's verify=True: the agent's trust is its own setting, never a stray
        # variable's. Only a request that turns verification off (or on) against the
        # session's would change the shared context for every thread: refused.
        if (verify is False) != (self._verify is False):
            raise ValueError(f"this session verifies as {self._verify!r}; a request asked for {verify!r}")
        super().cert_verify(conn, url, self._verify, cert)
        conn.ca_certs = conn.ca_cert_dir = None  # the context holds them: urllib3 would load them again


def session_for(verify: bool | str) -> Any:
    """A requests Session whose https connections share the process's context for `verify`,
    taken at its first https request. A CA bundle that cannot be loaded fails each https
    request with the TLS error that names it, which is retried like any other failure."""
    import requests

    session = requests.Session()
    session.mount("https://", SharedContextAdapter(verify))
    return session
