"""The proxy the environment names for a URL, as requests and curl read it: <scheme>_proxy
(lower case first), else all_proxy; none when NO_PROXY names the host (a domain and its
subdomains, host:port, an IP network, or "*"). Only http:// proxies: https is tunnelled."""

from __future__ import annotations

import base64
import os
from typing import NamedTuple
from urllib.parse import unquote, urlsplit

from faden_agent.common.redact import redact_url


class ProxyError(ValueError):
    """A proxy setting this client cannot use; the text names it without its password."""


class Proxy(NamedTuple):
    host: str
    port: int
    authorization: str | None  # the Proxy-Authorization header's value, when the URL has a user
    shown: str  # the URL without its user and password, for messages


def _setting(name: str) -> str:
    return os.environ.get(name.lower()) or os.environ.get(name.upper()) or ""


def proxy_for(scheme: str, host: str, port: int) -> Proxy | None:
    """The proxy to reach scheme://host:port through, or None (go directly)."""
    url = _setting(f"{scheme}_proxy") or _setting("all_proxy")
    if not url or bypassed(host, port, _setting("no_proxy")):
        return None
    return parse_proxy(url)


def parse_proxy(url: str) -> Proxy:
    if "://" not in url:
        url = "http://" + url  # curl's and requests' reading of "proxy:3128"
    shown = redact_url(url) or ""
    try:
        parts = urlsplit(url)
        port = parts.port or 80
    except ValueError:
        raise ProxyError(f"proxy {shown!r} is not a URL with a valid port") from None
    if parts.scheme != "http" or not parts.hostname:
        raise ProxyError(f"proxy {shown!r}: only http:// proxies are supported")
    authorization = None
    if parts.username is not None:
        pair = f"{unquote(parts.username)}:{unquote(parts.password or '')}".encode()
        authorization = "Basic " + base64.b64encode(pair).decode()
    return Proxy(parts.hostname, port, authorization, shown)


def bypassed(host: str, port: int, no_proxy: str) -> bool:
    """Whether NO_PROXY (comma-separated) names host or host:port."""
    host = host.lower().rstrip(".")
    for entry in (part.strip().lower() for part in no_proxy.split(",")):
        if entry == "*":
            return True
        name, colon, entry_port = entry.rpartition(":") if entry.count(":") == 1 else ("", "", "")
        if colon:
            if entry_port != str(port):
                continue
            entry = name
        entry = entry.lstrip("*").lstrip(".")
        if not entry:
            continue
        if "/" in entry:
            if _in_network(host, entry):
                return True
            continue
        if host == entry or host.endswith("." + entry):
            return True
    return False


def _in_network(host: str, network: str) -> bool:
    import ipaddress  # only for a NO_PROXY that names a network: seldom set

    try:
        return ipaddress.ip_address(host.strip("[]")) in ipaddress.ip_network(network, strict=False)
    except (ValueError, TypeError):
        return False
