"""GET /downloads/<file>: the files of the --downloads directory (agent builds, install.sh),
one level deep, nothing outside it."""

from __future__ import annotations

from faden_agent import protocol
from faden_agent.devbackend.web import HttpError, Request, Route, route


def download(req: Request, name: str) -> int:
    root = req.backend.downloads
    if root is None:
        raise HttpError(404, "not_found", "no downloads directory configured")
    path = (root / name).resolve()
    if path.parent != root.resolve() or not path.is_file():
        raise HttpError(404, "not_found", f"no such download: {name}")
    return req.send_bytes(200, path.read_bytes(), "application/octet-stream")


ROUTES: list[Route] = [route("GET", protocol.DOWNLOADS_PATH, download)]
