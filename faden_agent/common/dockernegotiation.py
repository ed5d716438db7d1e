"""The Docker API version a client speaks, negotiated as the Go client's
WithAPIVersionNegotiation does: on its first request a bounded /version read, then the
highest version both sides speak (>= 1.40); again after a "too old/too new" refusal (that
request is sent once more) and after a lost connection (an engine restarted or upgraded)."""

from __future__ import annotations

import re
import threading
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import docker
import requests
from docker.errors import DockerException
from docker.utils import version_lt

if TYPE_CHECKING:
    from collections.abc import Callable

# The newest API the SDK's requests are written for: the most this side speaks.
CLIENT_MAX_API = docker.constants.DEFAULT_DOCKER_API_VERSION
# Device requests (GPUs) came with API 1.40 (Docker 19.03): no older engine can run our specs.
CLIENT_MIN_API = "1.40"
# Until an engine answered /version: what Docker 20.10 speaks (the oldest common engine).
UNNEGOTIATED_API = "1.41"
NEGOTIATE_TIMEOUT_S = 5.0  # the /version read; less when the client's own timeout is shorter
_REFUSAL = re.compile(r"client version \S+ is too (old|new)", re.IGNORECASE)


class EngineTooOld(DockerException):
    """The engine speaks no API version this agent can use."""


@dataclass(frozen=True)
class EngineVersion:
    """What /version said, and the API version this client speaks with that engine."""

    version: str
    api_version: str  # the engine's newest
    min_api_version: str  # the engine's oldest
    api_in_use: str


def choose_api_version(engine_max: str, engine_min: str) -> str:
    """The highest version both sides speak (the Go client's rule), >= CLIENT_MIN_API."""
    chosen = engine_max if version_lt(engine_max, CLIENT_MAX_API) else CLIENT_MAX_API
    if version_lt(chosen, CLIENT_MIN_API):
        raise EngineTooOld(
            f"the Docker engine speaks API {engine_max} at most; the agent needs {CLIENT_MIN_API} "
            "or newer (Docker 19.03+): upgrade the engine"
        )
    if version_lt(chosen, engine_min):
        raise EngineTooOld(
            f"the Docker engine needs API {engine_min} or newer; the agent speaks up to {CLIENT_MAX_API}: "
            "upgrade the agent"
        )
    return chosen


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
        self._ready = False  # the SDK's __init__ reads _version: no request from there
        kwargs["version"] = UNNEGOTIATED_API
        super().__init__(*args, **kwargs)
        self._ready = True

    @property
    def _version(self) -> str:
        # One request reads _version several times: a hung engine costs one bounded wait, not one each.
        if self._ready and self._engine is None and time.monotonic() >= self._retry_at:
            self.negotiate()
        return self._raw_version

    @_version.setter
    def _version(self, value: str) -> None:
        self._raw_version = value

    @property
    def engine(self) -> EngineVersion | None:
        """What the last negotiation found (None before one succeeded)."""
        return self._engine

    def negotiate(self) -> EngineVersion | None:
        """Read /version (bounded) and choose. An engine that does not answer leaves the
        client unnegotiated (the request that follows reports the engine's failure)."""
        with self._lock:
            timeout = min(NEGOTIATE_TIMEOUT_S, self.timeout) if self.timeout else NEGOTIATE_TIMEOUT_S
            try:
                response = docker.APIClient._get(self, self._url("/version", versioned_api=False), timeout=timeout)
                answer = self._result(response, json=True)
            except (requests.exceptions.RequestException, DockerException, ValueError):
                answer = None
            if not isinstance(answer, dict) or not isinstance(answer.get("ApiVersion"), str):
                self._retry_at = time.monotonic() + timeout
                return None
            engine_max = answer["ApiVersion"]
            engine_min = answer.get("MinAPIVersion")
            if not isinstance(engine_min, str):
                engine_min = "1.12"  # engines before 1.25 do not say; 1.12 is the oldest there was
            chosen = choose_api_version(engine_max, engine_min)
            self._raw_version = chosen
            self._engine = EngineVersion(str(answer.get("Version") or "?"), engine_max, engine_min, chosen)
            return self._engine

    def forget(self) -> None:
        """Negotiate again on the next request."""
        self._engine = None
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
        if self.negotiate() is None or self._raw_version == used or not resendable(kwargs.get("data")):
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
