"""A self-signed certificate and key for 127.0.0.1 (openssl), for servers the tests run over https."""

from __future__ import annotations

import subprocess
from pathlib import Path


def self_signed(directory: Path) -> tuple[Path, Path]:
    cert, key = directory / "peer.crt", directory / "peer.key"
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-subj", "/CN=127.0.0.1"]
        + ["-addext", "subjectAltName=IP:127.0.0.1", "-keyout", str(key), "-out", str(cert)],
        check=True,
        capture_output=True,
    )
    return cert, key
