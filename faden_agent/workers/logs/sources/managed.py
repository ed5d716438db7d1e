"""The managed containers' names as the containers source last listed them (None until its
first listing), and who is told when one is destroyed: the Ray source's retention."""

from __future__ import annotations

import threading
from collections.abc import Callable


class ManagedNames:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._names: dict[str, str] | None = None  # container id -> name
        self._listeners: list[Callable[[str], None]] = []

    def listed(self, names: dict[str, str]) -> None:
        """A full listing: id -> name of every managed container that exists."""
        with self._lock:
            self._names = dict(names)

    def seen(self, container_id: str, name: str) -> None:
        with self._lock:
            if self._names is not None:
                self._names[container_id] = name

    def removed(self, container_id: str) -> None:
        """A managed container was destroyed: its name goes, and the listeners hear it."""
        with self._lock:
            name = self._names.pop(container_id, None) if self._names is not None else None
        if name is not None:
            for listener in self._listeners:
                listener(name)

    def present(self) -> set[str] | None:
        with self._lock:
            return None if self._names is None else set(self._names.values())

    def when_removed(self, listener: Callable[[str], None]) -> None:
        self._listeners.append(listener)
