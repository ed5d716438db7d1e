"""The reference backend's HTTP server: the route tables of its API modules joined, and
make_server. Standard library only (plus orjson), so it runs anywhere Python does; the agent
itself never imports this package.
Notes (why, figures, history): docs/design-notes.md.
"""

from __future__ import annotations

import ssl
from http.server import ThreadingHTTPServer
from pathlib import Path

from faden_agent.devbackend import api_admin, api_agent, api_relay, downloads, faults
from faden_agent.devbackend.app import Backend
from faden_agent.devbackend.web import Request, Route

ROUTES: list[Route] = [*api_agent.ROUTES, *api_relay.ROUTES, *downloads.ROUTES, *api_admin.ROUTES, *faults.ROUTES]


class Server(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True


def make_server(
    backend: Backend, host: str, port: int, *, tls_cert: Path | None = None, tls_key: Path | None = None
) -> Server:
    handler = type("BoundRequest", (Request,), {"backend": backend, "routes": ROUTES})
    server = Server((host, port), handler)
    if tls_cert is not None:
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(str(tls_cert), str(tls_key) if tls_key else None)
        server.socket = context.wrap_socket(server.socket, server_side=True)
    return server
