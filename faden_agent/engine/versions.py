"""The Docker API version a client speaks, negotiated as the Go client's
WithAPIVersionNegotiation does: on its first request a /version read bounded in bytes and in
total time, then the highest version both sides speak (>= 1.40, digits.digits only); again
after a "too old/too new" refusal and after a lost connection. An answer that names no
usable version is one EngineVersionError, kept briefly. Negotiation holds that state."""

from __future__ import annotations

import re
import threading
import time
from collections.abc import Callable
from typing import Any, NamedTuple

from faden_agent.engine.errors import EngineTooOld, EngineVersionError

# The newest API whose requests this agent writes (its own and the Docker SDK 7.1's).
CLIENT_MAX_API = "1.45"
# Device requests (GPUs) came with API 1.40 (Docker 19.03): no older engine can run our specs.
CLIENT_MIN_API = "1.40"
# Until an engine answered /version: what Docker 20.10 speaks (the oldest common engine).
UNNEGOTIATED_API = "1.41"
NEGOTIATE_TIMEOUT_S = 5.0  # the whole /version read; less when the client's own timeout is shorter
VERSION_BYTES = 64 << 10  # a /version answer is ~1 KiB
FAILURE_KEPT_S = 2.0  # an unusable answer fails every request this long before /version is asked again
_API_VERSION = re.compile(r"(\d{1,4})\.(\d{1,4})")
_ENGINE_VERSION = re.compile(r"[0-9A-Za-z][0-9A-Za-z.+~_-]{0,63}")
_REFUSAL = re.compile(r"client version \S+ is too (old|new)", re.IGNORECASE)


class EngineVersion(NamedTuple):
    """What /version said (canonical), and the API version this client speaks with that engine."""

    version: str
    api_version: str  # the engine's newest
    min_api_version: str  # the engine's oldest
    api_in_use: str


def api_version(value: Any, what: str) -> tuple[int, int]:
    """(major, minor) of an API version of the form digits.digits; EngineVersionError else."""
    match = _API_VERSION.fullmatch(value) if isinstance(value, str) else None
    if match is None:
        shown = repr(value[:40]) if isinstance(value, str) else type(value).__name__
        raise EngineVersionError(
            f"the Docker engine's /version gives {what} {shown}: not an API version (digits.digits)"
        )
    return int(match.group(1)), int(match.group(2))


def _text(version: tuple[int, int]) -> str:
    return f"{version[0]}.{version[1]}"


def choose_api_version(engine_max: Any, engine_min: Any) -> str:
    """The highest version both sides speak (the Go client's rule), >= CLIENT_MIN_API, in
    its canonical form (what goes into request paths)."""
    top, bottom = api_version(engine_max, "ApiVersion"), api_version(engine_min, "MinAPIVersion")
    ours = api_version(CLIENT_MAX_API, "ours")
    chosen = min(top, ours)
    if chosen < api_version(CLIENT_MIN_API, "ours"):
        raise EngineTooOld(
            f"the Docker engine speaks API {_text(top)} at most; the agent needs {CLIENT_MIN_API} "
            "or newer (Docker 19.03+): upgrade the engine"
        )
    if chosen < bottom:
        raise EngineTooOld(
            f"the Docker engine needs API {_text(bottom)} or newer; the agent speaks up to {CLIENT_MAX_API}: "
            "upgrade the agent"
        )
    return _text(chosen)


def is_version_refusal(text: str) -> bool:
    """The engine's answer to a request in a version it no longer (or not yet) speaks."""
    return bool(_REFUSAL.search(text))


def parse_version_answer(body: bytes) -> dict[str, Any]:
    """A /version body as a JSON object; EngineVersionError when it is none."""
    import orjson

    try:
        answer = orjson.loads(body)
    except orjson.JSONDecodeError:
        raise EngineVersionError("the Docker engine's /version answer is not JSON") from None
    if not isinstance(answer, dict):
        raise EngineVersionError("the Docker engine's /version answer is not a JSON object")
    return answer


class Negotiation:
    """One client's negotiated version. `ask(deadline_s)` reads /version within deadline_s:
    the answer, None when the engine gave none in time (its trouble: the request that follows
    reports it), or EngineVersionError. The read runs on a thread of its own, so a drip-fed
    head holds that thread, never the caller; one at a time."""

    def __init__(self, ask: Callable[[float], dict[str, Any] | None], timeout_s: float | None):
        self._ask = ask
        self._deadline_s = min(NEGOTIATE_TIMEOUT_S, timeout_s) if timeout_s else NEGOTIATE_TIMEOUT_S
        self._lock = threading.Lock()
        self.raw_version = UNNEGOTIATED_API
        self.engine: EngineVersion | None = None  # what the last negotiation found
        self._retry_at = 0.0  # after an engine that did not answer: not before this (monotonic)
        self._failure: EngineVersionError | None = None  # an unusable answer, until _retry_at
        self._asking: threading.Thread | None = None  # a /version read past its deadline
        self.last_answer: dict[str, Any] | None = None  # the /version answer the version came from

    def current(self) -> str:
        """The version for the next request: negotiated first when due; the kept failure raised."""
        if self.engine is None:
            if time.monotonic() >= self._retry_at:
                self.negotiate()
            self.raise_failure()
        return self.raw_version

    def raise_failure(self) -> None:
        failure = self._failure
        if failure is not None:
            raise type(failure)(str(failure))  # a new one each time: a kept traceback would grow

    def negotiate(self) -> EngineVersion | None:
        """Read /version (bounded) and choose. None unless a version was chosen."""
        with self._lock:
            self._failure = None
            try:
                answer = self._read_version()
                if answer is None:
                    self._retry_at = time.monotonic() + self._deadline_s
                    return None
                engine_max = answer.get("ApiVersion")
                engine_min = answer.get("MinAPIVersion")
                if engine_min is None:
                    engine_min = "1.12"  # engines before 1.25 do not say; 1.12 is the oldest there was
                chosen = choose_api_version(engine_max, engine_min)
            except EngineVersionError as failure:
                self._failure = failure
                self._retry_at = time.monotonic() + FAILURE_KEPT_S
                return None
            version = answer.get("Version")
            self.raw_version = chosen
            self.last_answer = answer
            self.engine = EngineVersion(
                version if isinstance(version, str) and _ENGINE_VERSION.fullmatch(version) else "?",
                _text(api_version(engine_max, "ApiVersion")),
                _text(api_version(engine_min, "MinAPIVersion")),
                chosen,
            )
            return self.engine

    def _read_version(self) -> dict[str, Any] | None:
        if self._asking is not None and self._asking.is_alive():
            return None
        outcome: list[Any] = []

        def ask() -> None:
            try:
                outcome.append(self._ask(self._deadline_s))
            except EngineVersionError as failure:
                outcome.append(failure)

        asking = threading.Thread(target=ask, name="docker-version", daemon=True)
        asking.start()
        asking.join(self._deadline_s)
        if asking.is_alive():
            self._asking = asking
            return None
        if outcome and isinstance(outcome[0], EngineVersionError):
            raise outcome[0]
        return outcome[0] if outcome else None

    def forget(self) -> None:
        """Negotiate again on the next request."""
        self.engine = None
        self._failure = None
        self._retry_at = 0.0
