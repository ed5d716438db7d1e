"""A container as the engine's inspect shows it, with the Docker SDK model's fields the agent
reads (id, name, labels, status, attrs) and what it does with one at idle (reload, logs)."""

from __future__ import annotations

from typing import Any

from faden_agent.engine.client import EngineClient
from faden_agent.engine.errors import NotFound
from faden_agent.engine.streams import LogStream


class Container:
    def __init__(self, engine: EngineClient, attrs: dict[str, Any]):
        self.engine = engine
        self.attrs = attrs

    @property
    def id(self) -> str:
        return str(self.attrs.get("Id") or "")

    @property
    def name(self) -> str:
        return str(self.attrs.get("Name") or "").lstrip("/")

    @property
    def labels(self) -> dict[str, str]:
        return (self.attrs.get("Config") or {}).get("Labels") or {}

    @property
    def status(self) -> str:
        return str((self.attrs.get("State") or {}).get("Status") or "")

    def reload(self) -> None:
        """The engine's inspect again (NotFound when it was removed)."""
        self.attrs = self.engine.inspect_container(self.id)

    def logs(self, **options: Any) -> LogStream:
        """EngineClient.logs of this container (framed unless it has a TTY)."""
        tty = bool((self.attrs.get("Config") or {}).get("Tty"))
        return self.engine.logs(self.id, tty=tty, **options)

    def __repr__(self) -> str:
        return f"<Container {self.id[:12]} {self.name}>"


def get(engine: EngineClient, ref: str) -> Container:
    """The container of that name or id (the engine also takes an id prefix); NotFound else."""
    return Container(engine, engine.inspect_container(ref))


def listed(
    engine: EngineClient, *, all: bool = False, filters: dict[str, Any] | None = None, ignore_removed: bool = False
) -> list[Container]:
    """The containers of the engine's list, each inspected; one removed in between is left out
    with ignore_removed, else its NotFound raised (as the Docker SDK's list does)."""
    found = []
    for summary in engine.containers(all=all, filters=filters):
        try:
            found.append(get(engine, str(summary.get("Id") or "")))
        except NotFound:
            if not ignore_removed:
                raise
    return found
