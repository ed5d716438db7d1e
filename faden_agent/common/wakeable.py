"""A wait in the kernel on one descriptor that another thread can end."""

from __future__ import annotations

import os
import select


class Wakeable:
    def __init__(self, fd: int):
        self._wake_r, self._wake_w = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
        self._fd = fd
        self._poll = select.poll()
        self._poll.register(fd, select.POLLIN)
        self._poll.register(self._wake_r, select.POLLIN)

    def wait(self, timeout_s: float | None) -> bool:
        """Until the descriptor is readable (True), wake() or timeout_s (None: no timeout)."""
        ready = {fd for fd, _ in self._poll.poll(None if timeout_s is None else max(0, int(timeout_s * 1000)))}
        if self._wake_r in ready:
            try:
                os.read(self._wake_r, 64)
            except BlockingIOError:
                pass
        return self._fd in ready

    def wake(self) -> None:
        try:
            os.write(self._wake_w, b"x")
        except OSError:
            pass  # a wake is pending already (the pipe is full), or closed

    def close(self) -> None:
        for fd in (self._wake_r, self._wake_w):
            try:
                os.close(fd)
            except OSError:
                pass
