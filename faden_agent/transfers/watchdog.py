"""A thread that watches one transfer or probe from the side: every `poll_s` it asks
`check()` for a reason to end it (stalled, past its wall bound, stopped), and on the first
one calls `fire()` once (which shuts the socket, so a blocked read returns at once)."""

from __future__ import annotations

import threading
from collections.abc import Callable


class Watchdog:
    def __init__(self, name: str, check: Callable[[], str | None], fire: Callable[[], None], poll_s: float = 0.2):
        self.check = check
        self.fire = fire
        self.poll_s = poll_s
        self.reason: str | None = None
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._watch, name=name, daemon=True)

    def __enter__(self) -> Watchdog:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._done.set()
        self._thread.join(self.poll_s + 1)

    def _watch(self) -> None:
        while not self._done.wait(self.poll_s):
            reason = self.check()
            if reason is not None:
                self.reason = reason
                try:
                    self.fire()
                except OSError:
                    pass  # already closed
                return
