"""The Docker SDK client, for what the idle readers (client.py) do not do: creating containers,
pulls, image removal and prunes, peer transfers. Imported where such a command first runs, so a
worker that only reads holds none of the SDK. Its API version is negotiated (versions.py) on
its first request, again after a "too old/new" refusal (that request is sent once more) and
after a lost connection."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

import docker
import requests
import urllib3
from docker.errors import DockerException

from faden_agent.engine.errors import EngineVersionError
from faden_agent.engine.versions import (
    UNNEGOTIATED_API,
    VERSION_BYTES,
    Negotiation,
    is_version_refusal,
    parse_version_answer,
)

if TYPE_CHECKING:
    from collections.abc import Callable

    from faden_agent.engine.versions import EngineVersion


def make_client(docker_host: str | None, *, timeout_s: float, max_pool_size: int | None = None) -> docker.DockerClient:
    """A client whose every socket read times out after timeout_s and whose API version is
    negotiated on its first request (nothing is sent here); max_pool_size: connections kept
    for threads that share the client (the SDK's default is 10)."""
    options: dict[str, object] = {"timeout": timeout_s}
    if max_pool_size is not None:
        options["max_pool_size"] = max_pool_size
    if docker_host:
        return NegotiatingClient(base_url=docker_host, **options)
    return NegotiatingClient.from_env(**options)


def engine_version(client: docker.DockerClient) -> EngineVersion | None:
    """The negotiated versions of a client made by make_client (negotiating now if not yet)."""
    api = client.api
    if not isinstance(api, NegotiatingAPIClient):
        return None
    return api.engine or api.negotiate()


def resendable(data: Any) -> bool:
    """A request body that can be sent a second time (none, bytes, text)."""
    return data is None or isinstance(data, (bytes, str))


class NegotiatingAPIClient(docker.APIClient):
    """docker.APIClient whose version is negotiated on first use, in the calling thread."""

    def __init__(self, *args: Any, **kwargs: Any):
        self._ready = False  # the SDK's __init__ reads _version: no request from there
        self._raw = kwargs["version"] = UNNEGOTIATED_API
        super().__init__(*args, **kwargs)
        self.negotiation = Negotiation(self._ask_version, self.timeout)
        if self.base_url.startswith("http+docker://"):
            # A local engine (a Unix socket, a named pipe, ssh) takes no proxy and no .netrc
            # login: unasked, requests reads both (the whole environment, ~/.netrc) per request.
            self.trust_env = False
        self._ready = True

    @property
    def _version(self) -> str:
        # One request reads _version several times: a hung engine costs one bounded wait, not one each.
        return self.negotiation.current() if self._ready else self._raw

    @_version.setter
    def _version(self, value: str) -> None:
        self._raw = value

    @property
    def engine(self) -> EngineVersion | None:
        """What the last negotiation found (None before one succeeded)."""
        return self.negotiation.engine

    def negotiate(self) -> EngineVersion | None:
        return self.negotiation.negotiate()

    def forget(self) -> None:
        self.negotiation.forget()

    def _ask_version(self, deadline_s: float) -> dict[str, Any] | None:
        give_up = time.monotonic() + deadline_s
        url = self._url("/version", versioned_api=False)
        try:
            response = docker.APIClient._get(self, url, timeout=deadline_s, stream=True)
        except (requests.exceptions.RequestException, DockerException, OSError):
            return None
        try:
            if response.status_code != 200:
                return None  # the engine's trouble: the request that follows reports it
            body = bytearray()
            while chunk := response.raw.read1(VERSION_BYTES):
                body += chunk
                if len(body) > VERSION_BYTES:
                    raise EngineVersionError(f"the Docker engine's /version answer is over {VERSION_BYTES} bytes")
                if time.monotonic() > give_up:
                    return None  # drip-fed: the caller has gone on already
            return parse_version_answer(bytes(body))
        except (urllib3.exceptions.HTTPError, requests.exceptions.RequestException, OSError):
            return None
        finally:
            response.close()

    def _again_if_refused(self, send: Callable[..., requests.Response], url: str, **kwargs: Any) -> requests.Response:
        try:
            response = send(self, url, **kwargs)
        except requests.exceptions.ConnectionError:
            self.forget()  # the engine may come back as another version
            raise
        if response.status_code != 400 or not is_version_refusal(response.text):
            return response
        used = self.negotiation.raw_version
        self.forget()
        if self.negotiate() is None:
            self.negotiation.raise_failure()  # the engine moved to a range this agent cannot speak
            return response
        if self.negotiation.raw_version == used or not resendable(kwargs.get("data")):
            return response  # a body read from a stream cannot be sent twice: the caller sees the refusal
        response.close()
        return send(self, url.replace(f"/v{used}/", f"/v{self.negotiation.raw_version}/", 1), **kwargs)

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
