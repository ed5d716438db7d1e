"""Run the reference backend in the foreground until SIGTERM/SIGINT."""

from __future__ import annotations

import logging
import signal
import threading
from pathlib import Path
from typing import Any

from faden_agent.devbackend.app import Backend
from faden_agent.devbackend.server import make_server

log = logging.getLogger("faden_agent.devbackend")


def serve(
    host: str,
    port: int,
    data_dir: Path,
    admin_token: str,
    *,
    downloads: Path | None = None,
    loki_url: str | None = None,
    loki_tenant: str | None = None,
    keepalive_sec: float = 15.0,
    tls_cert: Path | None = None,
    tls_key: Path | None = None,
) -> int:
    backend = Backend(
        data_dir,
        admin_token,
        downloads=downloads,
        loki_url=loki_url,
        loki_tenant=loki_tenant,
        keepalive_sec=keepalive_sec,
    )
    server = make_server(backend, host, port, tls_cert=tls_cert, tls_key=tls_key)
    scheme = "https" if tls_cert else "http"
    bound_host, bound_port = str(server.server_address[0]), server.server_address[1]

    def stop(*_: Any) -> None:
        threading.Thread(target=server.shutdown, daemon=True).start()

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    # The first line tells scripts (and tests/support/backendproc.py) where we listen.
    print(f"faden dev-backend listening on {scheme}://{bound_host}:{bound_port} data={data_dir}", flush=True)
    try:
        server.serve_forever(poll_interval=0.2)
    finally:
        server.server_close()
        backend.store.close()
    log.info("dev-backend stopped")
    return 0
