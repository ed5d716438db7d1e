"""The client TLS context: one per trust setting and process, shared by every connection
the agent opens (http/client.py's and its own sockets).
Trust: CA_BUNDLE when set, else the system's store (SSL_CERT_FILE/SSL_CERT_DIR, else the
distributions' bundle), else certifi's.
"""

from __future__ import annotations

import os
import ssl
import threading

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
    """`verify` as Config.tls_verify() gives it: False (no checks), True (the system's
    store, else certifi's), or the path of a CA bundle. Built once per value and process."""
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
    store = system_store()
    if store is None:
        import certifi  # the public roots, for a host with no store of its own

        store = (certifi.where(), None)
    cafile, capath = store
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
