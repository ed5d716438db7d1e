"""The client TLS context for sockets the agent opens itself (not through requests)."""

from __future__ import annotations

import ssl


def client_context(verify: bool | str) -> ssl.SSLContext:
    """`verify` as Config.tls_verify() gives it: False (no checks), True (the system's CAs),
    or the path of a CA bundle."""
    if verify is False:
        context = ssl.create_default_context()
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
        return context
    return ssl.create_default_context(cafile=verify if isinstance(verify, str) else None)
