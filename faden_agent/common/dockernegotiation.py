"""The Docker API version a client speaks, negotiated as the Go client's
WithAPIVersionNegotiation does: on its first request a /version read bounded in bytes and in
total time, then the highest version both sides speak (>= 1.40, digits.digits only); again
after a "too old/too new" refusal (that request is sent once more) and after a lost
connection. An answer that names no usable version is one EngineVersionError, kept briefly."""

from __future__ import annotations

import re
import threading
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import docker
import orjson
import requests
import urllib3
from docker.errors import DockerException

if TYPE_CHECKING:
    from collections.abc import Callable

# The newest API the SDK's requests are written for: the most this side speaks.
CLIENT_MAX_API = docker.constants.DEFAULT_DOCKER_API_VERSION
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


class EngineVersionError(DockerException):
    """The engine's /version names no API version this agent can use."""


class EngineTooOld(EngineVersionError):
    """The engine speaks no API version this agent can use."""


@dataclass(frozen=True)
class EngineVersion:
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


def resendable(data: Any) -> bool:
    """A request body that can be sent a second time (none, bytes, text)."""
    return data is None or isinstance(data, (bytes, str))


class NegotiatingAPIClient(docker.APIClient):
    """docker.APIClient whose version is negotiated on first use, in the calling thread."""

    def __init__(self, *args: Any, **kwargs: Any):
        self._lock = threading.Lock()
        self._raw_version = UNNEGOTIATED_API
        self._engine: EngineVersion | None = None
        self._retry_at = 0.0  # after an engine that did not answer: not before this (monotonic)
        self._failure: EngineVersionError | None = None  # an unusable answer, until _retry_at
        self._asking: threading.Thread | None = None  # a /version read past its deadline
        self._ready = False  # the SDK's __init__ reads _version: no request from there
        kwargs["version"] = UNNEGOTIATED_API
        super().__init__(*args, **kwargs)
        if self.base_url.startswith("http+docker://"):
            # A local engine (a Unix socket, a named pipe, ssh) takes no proxy and no .netrc
            # login: unasked, requests reads both (the whole environment, ~/.netrc) per request.
            self.trust_env = False
        self._ready = True

    @property
    def _version(self) -> str:
        # One request reads _version several times: a hung engine costs one bounded wait, not one each.
        if self._ready and self._engine is None:
            if time.monotonic() >= self._retry_at:
                self.negotiate()
            self._raise_failure()
        return self._raw_version

    @_version.setter
    def _version(self, value: str) -> None:
        self._raw_version = value

    def _raise_failure(self) -> None:
        failure = self._failure
        if failure is not None:
            raise type(failure)(str(failure))  # a new one each time: a kept traceback would grow

    @property
    def engine(self) -> EngineVersion | None:
        """What the last negotiation found (None before one succeeded)."""
        return self._engine

    def negotiate(self) -> EngineVersion | None:
        """Read /version (bounded) and choose. An engine that does not answer in time leaves
        the client unnegotiated (the request that follows reports the engine's failure); an
        answer that names no usable version is kept as the failure of every request for
        FAILURE_KEPT_S. None unless a version was chosen."""
        with self._lock:
            deadline_s = min(NEGOTIATE_TIMEOUT_S, self.timeout) if self.timeout else NEGOTIATE_TIMEOUT_S
            self._failure = None
            try:
                answer = self._read_version(deadline_s)
                if answer is None:
                    self._retry_at = time.monotonic() + deadline_s
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
            self._raw_version = chosen
            self._engine = EngineVersion(
                version if isinstance(version, str) and _ENGINE_VERSION.fullmatch(version) else "?",
                _text(api_version(engine_max, "ApiVersion")),
                _text(api_version(engine_min, "MinAPIVersion")),
                chosen,
            )
            return self._engine

    def _read_version(self, deadline_s: float) -> dict[str, Any] | None:
        """The /version answer read within `deadline_s` in all (in a thread: a drip-fed head
        holds that thread, never the caller; one at a time), None when none came in time."""
        if self._asking is not None and self._asking.is_alive():
            return None
        outcome: list[Any] = []
        asking = threading.Thread(target=self._ask_version, args=(deadline_s, outcome), name="docker-version")
        asking.daemon = True
        asking.start()
        asking.join(deadline_s)
        if asking.is_alive():
            self._asking = asking
            return None
        if outcome and isinstance(outcome[0], EngineVersionError):
            raise outcome[0]
        return outcome[0] if outcome else None

    def _ask_version(self, deadline_s: float, outcome: list[Any]) -> None:
        give_up = time.monotonic() + deadline_s
        url = self._url("/version", versioned_api=False)
        try:
            response = docker.APIClient._get(self, url, timeout=deadline_s, stream=True)
        except (requests.exceptions.RequestException, DockerException, OSError):
            return
        try:
            if response.status_code != 200:
                return  # the engine's trouble: the request that follows reports it
            body = bytearray()
            while chunk := response.raw.read1(VERSION_BYTES):
                body += chunk
                if len(body) > VERSION_BYTES:
                    raise EngineVersionError(f"the Docker engine's /version answer is over {VERSION_BYTES} bytes")
                if time.monotonic() > give_up:
                    return
            answer = orjson.loads(body)
            if not isinstance(answer, dict):
                raise EngineVersionError("the Docker engine's /version answer is not a JSON object")
            outcome.append(answer)
        except orjson.JSONDecodeError:
            outcome.append(EngineVersionError("the Docker engine's /version answer is not JSON"))
        except EngineVersionError as failure:
            outcome.append(failure)
        except (urllib3.exceptions.HTTPError, requests.exceptions.RequestException, OSError):
            return
        finally:
            response.close()

    def forget(self) -> None:
        """Negotiate again on the next request."""
        self._engine = None
        self._failure = None
        self._retry_at = 0.0

    def _again_if_refused(self, send: Callable[..., requests.Response], url: str, **kwargs: Any) -> requests.Response:
        try:
            response = send(self, url, **kwargs)
        except requests.exceptions.ConnectionError:
            self.forget()  # the engine may come back as another version
            raise
        if response.status_code != 400 or not is_version_refusal(response.text):
            return response
        used = self._raw_version
        self.forget()
        if self.negotiate() is None:
            self._raise_failure()  # the engine moved to a range this agent cannot speak
            return response
        if self._raw_version == used or not resendable(kwargs.get("data")):
            return response  # a body read from a stream cannot be sent twice: the caller sees the refusal
        response.close()
        return send(self, url.replace(f"/v{used}/", f"/v{self._raw_version}/", 1), **kwargs)

    def _get(self, url: str, **kwargs: Any) -> requests.Response:
        return self._again_if_refused(docker.APIClient._get, url, **kwargs)

    def _post(self, url: str, **kwargs: Any) -> requests.Response:
        return self._again_if_refused(docker.APIClient._post, url, **kwargs)

    def _put(self, url: str, **kwargs: Any) -> requests.Response:
        return self._again_if_refused(docker.APIClient._put, url, **kwargs)

    def _delete(self, url: str, **kwargs: Any) -> requests.Response:
        return self._again_if_refused(docker.APIClient._delete, url, **kwargs)


class NegotiatingClient(docker.DockerClient):
    def __init__(self, *args: Any, **kwargs: Any):
        self.api = NegotiatingAPIClient(*args, **kwargs)
