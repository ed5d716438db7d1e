"""The agent's client of the Docker engine's API for what the workers read at idle (ping,
version, info, df, container and image lists and inspects, events, logs) on http/client.py.
Each read but a followed stream is bounded by the timeout; the API version is negotiated first
(versions.py), again after a "too old/new" refusal (the request is sent once more) and after a
lost connection. Failures: errors.py's EngineUnreachable (with its cause), NotFound, ApiError."""

from __future__ import annotations

from typing import Any
from urllib.parse import quote, urlencode

import orjson

from faden_agent import __version__
from faden_agent.engine.address import resolve
from faden_agent.engine.errors import ApiError, EngineUnreachable, EngineVersionError, NotFound
from faden_agent.engine.streams import EventStream, LogStream
from faden_agent.engine.versions import (
    VERSION_BYTES,
    EngineVersion,
    Negotiation,
    is_version_refusal,
    parse_version_answer,
)
from faden_agent.http.answerbody import AnswerTooLarge, AnswerUnread
from faden_agent.http.client import Answer, HttpClient, HttpFailure, HttpTimeout

MAX_ANSWER_BYTES = 64 << 20  # a container list of a busy machine is a few MiB
EXPLANATION_BYTES = 64 << 10
Params = dict[str, Any]
# /info's DriverStatus entry of an engine whose images live in containerd (Docker 29's default)
CONTAINERD_STORE = ["driver-type", "io.containerd.snapshotter.v1"]


def image_store(info: dict) -> str:
    """ "containerd" (the containerd image store: images named by manifest digest, saved as
    OCI layouts with gzip'd layers) or "classic" (the graph driver's own store), from /info."""
    status = info.get("DriverStatus") or []
    return "containerd" if CONTAINERD_STORE in [list(pair) for pair in status if isinstance(pair, list)] else "classic"


def encode_filters(filters: dict[str, Any]) -> str:
    """The engine's filters parameter: each value a list of strings (as the Docker SDK writes it)."""
    encoded = {}
    for name, value in filters.items():
        values = value if isinstance(value, list) else [value]
        encoded[name] = [str(v).lower() if isinstance(v, bool) else str(v) for v in values]
    return orjson.dumps(encoded).decode()


class EngineClient:
    """Nothing is sent when made; `timeout_s`: each read's bound (None: none)."""

    def __init__(self, docker_host: str | None, timeout_s: float | None):
        address = resolve(docker_host)
        self.base_url = address.base_url
        self.timeout_s = timeout_s
        self.http = HttpClient(
            headers={"User-Agent": f"faden-agent/{__version__}"},
            unix_socket=address.unix_socket,
            context=address.context,
        )
        self.negotiation = Negotiation(self._ask_version, timeout_s)

    @property
    def engine(self) -> EngineVersion | None:
        """What the last negotiation found (None before one succeeded)."""
        return self.negotiation.engine

    def engine_version(self) -> EngineVersion | None:
        """The negotiated versions (negotiating now if not yet)."""
        return self.negotiation.engine or self.negotiation.negotiate()

    def close(self) -> None:
        self.http.close()

    # ------------------------------------------------------------------ plumbing

    def _ask_version(self, deadline_s: float) -> dict[str, Any] | None:
        try:
            answer = self.http.request("GET", f"{self.base_url}/version", timeout=deadline_s)
        except HttpFailure:
            return None
        with answer:
            if answer.status != 200:
                return None  # the engine's trouble: the request that follows reports it
            try:
                body = answer.read_all(VERSION_BYTES, deadline_s)
            except AnswerTooLarge:
                raise EngineVersionError(f"the Docker engine's /version answer is over {VERSION_BYTES} bytes") from None
            except AnswerUnread:
                return None
        return parse_version_answer(body)

    def _send(self, path: str, params: Params | None = None, *, follow: bool = False, versioned: bool = True) -> Answer:
        """GET path (versioned, with params); an answer of status < 400, else the engine's error raised."""
        query = f"?{urlencode(params)}" if params else ""
        used = self.negotiation.current() if versioned else ""
        answer = self._get(path, query, used, follow)
        if answer.status == 400 and versioned:
            explanation = self._explanation(answer)
            if not is_version_refusal(explanation):
                raise ApiError(400, explanation)
            self.negotiation.forget()
            if self.negotiation.negotiate() is None:
                self.negotiation.raise_failure()  # the engine moved to a range this agent cannot speak
                raise ApiError(400, explanation)
            if self.negotiation.raw_version == used:
                raise ApiError(400, explanation)
            answer = self._get(path, query, self.negotiation.raw_version, follow)
        if answer.status >= 400:
            explanation = self._explanation(answer)
            raise (NotFound if answer.status == 404 else ApiError)(answer.status, explanation)
        return answer

    def _get(self, path: str, query: str, version: str, follow: bool) -> Answer:
        prefix = f"/v{version}" if version else ""
        timeout = (self.timeout_s or 60.0, None) if follow else self.timeout_s or 300.0
        try:
            return self.http.request("GET", f"{self.base_url}{prefix}{path}{query}", timeout=timeout)
        except HttpFailure as exc:
            if not isinstance(exc, HttpTimeout):
                self.negotiation.forget()  # the engine may come back as another version
            raise EngineUnreachable(
                f"cannot reach the Docker engine: {exc}", timed_out=isinstance(exc, HttpTimeout)
            ) from exc

    def _explanation(self, answer: Answer) -> str:
        """The engine's words for an error answer (its JSON `message`, else the text), one line."""
        with answer:
            try:
                raw = answer.read_all(EXPLANATION_BYTES, self.timeout_s or 30.0)
            except AnswerUnread as exc:
                return f"({exc})"
        try:
            body = orjson.loads(raw)
            text = str(body.get("message") or "") if isinstance(body, dict) else ""
        except orjson.JSONDecodeError:
            text = ""
        return " ".join((text or raw[:1000].decode("utf-8", "replace")).split())[:500]

    def _json(self, path: str, params: Params | None = None, *, versioned: bool = True) -> Any:
        answer = self._send(path, params, versioned=versioned)
        with answer:
            try:
                body = answer.read_all(MAX_ANSWER_BYTES, self.timeout_s or 300.0)
            except AnswerUnread as exc:
                raise EngineUnreachable(f"the Docker engine's answer to {path}: {exc}") from None
        try:
            return orjson.loads(body)
        except orjson.JSONDecodeError:
            raise EngineUnreachable(f"the Docker engine's answer to {path} is not JSON") from None

    def _object(self, path: str, params: Params | None = None) -> dict[str, Any]:
        answer = self._json(path, params)
        if not isinstance(answer, dict):
            raise EngineUnreachable(f"the Docker engine's answer to {path} is not a JSON object")
        return answer

    def _list(self, path: str, params: Params | None = None) -> list[dict[str, Any]]:
        answer = self._json(path, params)
        if not isinstance(answer, list):
            raise EngineUnreachable(f"the Docker engine's answer to {path} is not a JSON list")
        return [item for item in answer if isinstance(item, dict)]

    # ------------------------------------------------------------------ the API

    def ping(self) -> bool:
        """True when the engine answers /_ping; EngineUnreachable or ApiError else."""
        with self._send("/_ping", versioned=False) as answer:
            answer.read_all(1024, self.timeout_s or 30.0)
        return True

    def version(self) -> dict[str, Any]:
        return self._object("/version")

    def info(self) -> dict[str, Any]:
        return self._object("/info")

    def df(self) -> dict[str, Any]:
        return self._object("/system/df")

    def containers(self, all: bool = False, filters: dict[str, Any] | None = None) -> list[dict[str, Any]]:
        """The summaries of /containers/json (Id, Names, Labels, State, ...): running ones, or all."""
        params: Params = {"all": int(all), "limit": -1}
        if filters:
            params["filters"] = encode_filters(filters)
        return self._list("/containers/json", params)

    def inspect_container(self, ref: str) -> dict[str, Any]:
        return self._object(f"/containers/{quote(ref, safe='')}/json")

    def images(self) -> list[dict[str, Any]]:
        return self._list("/images/json")

    def inspect_image(self, ref: str) -> dict[str, Any]:
        return self._object(f"/images/{quote(ref, safe='')}/json")

    def events(
        self, since: str | None = None, until: str | None = None, filters: dict[str, Any] | None = None
    ) -> EventStream:
        """The events from `since` (now when None) to `until` (followed without end when None)."""
        params: Params = {key: value for key, value in (("since", since), ("until", until)) if value is not None}
        if filters:
            params["filters"] = encode_filters(filters)
        return EventStream(self._send("/events", params, follow=until is None))

    def logs(
        self,
        ref: str,
        *,
        tty: bool,
        stdout: bool = True,
        stderr: bool = True,
        timestamps: bool = False,
        tail: int | None = None,
        since: float | int | None = None,
        follow: bool = False,
    ) -> LogStream:
        """A container's log; `tty`: the container's Config.Tty (its log comes unframed then)."""
        params: Params = {
            "stdout": int(stdout),
            "stderr": int(stderr),
            "timestamps": int(timestamps),
            "follow": int(follow),
            "tail": "all" if tail is None else tail,
        }
        if since:
            params["since"] = since
        return LogStream(self._send(f"/containers/{quote(ref, safe='')}/logs", params, follow=follow), tty)
