"""Where the Docker engine is and how to reach it, as the docker CLI and the Docker SDK read it:
FADEN_NODE_AGENT_DOCKER_HOST when set (as written: tcp:// is plain http), else DOCKER_HOST with
DOCKER_TLS_VERIFY and DOCKER_CERT_PATH (TLS with the client certificate there), else the local
socket. unix://, tcp://, http:// and https:// are taken; anything else fails naming it."""

from __future__ import annotations

import os
import ssl
from typing import NamedTuple
from urllib.parse import urlsplit

from faden_agent.common.redact import redact_url
from faden_agent.engine.errors import EngineUnreachable

DEFAULT_ENGINE_URL = "unix:///var/run/docker.sock"


class Address(NamedTuple):
    base_url: str  # what request paths are appended to
    unix_socket: str  # the socket's path, or "" over TCP
    context: ssl.SSLContext | None  # the engine's TLS (its CA, our client certificate); None: plain or default


def engine_url(docker_host: str | None) -> str:
    """The engine's address as the agent reaches it, for messages."""
    return docker_host or os.environ.get("DOCKER_HOST") or DEFAULT_ENGINE_URL


def resolve(docker_host: str | None) -> Address:
    """The Address of docker_host (the agent's setting), else of the environment's engine."""
    if docker_host:
        return _address(docker_host, None)
    verify_setting = os.environ.get("DOCKER_TLS_VERIFY")
    verify = verify_setting is not None and verify_setting != ""
    cert_path = os.environ.get("DOCKER_CERT_PATH") or ""
    context = None
    if verify or cert_path:
        context = _tls_context(cert_path or os.path.join(os.path.expanduser("~"), ".docker"), verify)
    return _address(os.environ.get("DOCKER_HOST") or DEFAULT_ENGINE_URL, context)


def _address(url: str, context: ssl.SSLContext | None) -> Address:
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018 - read to check it: a bad port raises ValueError
    except ValueError:
        raise EngineUnreachable(f"Docker engine address {redact_url(url)!r} is not a URL") from None
    if parts.scheme == "unix":
        return Address("http://localhost", parts.path or "/var/run/docker.sock", None)
    if parts.scheme in ("tcp", "http", "https") and parts.hostname:
        scheme = "https" if parts.scheme == "https" or context is not None else "http"
        return Address(f"{scheme}://{parts.netloc}", "", context)
    raise EngineUnreachable(
        f"Docker engine address {redact_url(url)!r}: only unix://, tcp://, http:// and https:// are supported"
    )


def _tls_context(cert_path: str, verify: bool) -> ssl.SSLContext:
    """The engine's CA (ca.pem) when verifying, and our certificate (cert.pem, key.pem) when there."""
    try:
        if verify:
            context = ssl.create_default_context(cafile=os.path.join(cert_path, "ca.pem"))
        else:
            context = ssl.create_default_context()
            context.check_hostname = False
            context.verify_mode = ssl.CERT_NONE
        cert, key = os.path.join(cert_path, "cert.pem"), os.path.join(cert_path, "key.pem")
        if os.path.exists(cert) and os.path.exists(key):
            context.load_cert_chain(cert, key)
    except (OSError, ssl.SSLError) as exc:
        raise EngineUnreachable(f"the Docker engine's TLS files in {cert_path} cannot be loaded: {exc}") from None
    return context
