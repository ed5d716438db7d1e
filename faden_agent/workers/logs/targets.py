"""Where pushes go: Loki directly, or whatever the backend names.

Both answer `send(payload)` with an Answer (status None: no HTTP answer at all); the push
policy (retry, split, give up) lives in loki.py and is the same for both.

- LOKI_URL set: DirectLoki(<url>/loki/api/v1/push).
- unset: ViaBackend asks the backend (`GET .../logs/target`) with this node's credential:
  {"mode": "loki", "url"} -> push there directly; {"mode": "push", "path"} -> push through
  the backend. Any failed push makes it ask again before the next try.
"""

from __future__ import annotations

import gzip
import logging
from typing import NamedTuple

import requests

from faden_agent import __version__
from faden_agent.backend import BackendClient, BackendError, parse_retry_after
from faden_agent.config import Config
from faden_agent.redact import redact_url
from faden_agent.state import StateError, load_state

PUSH_PATH = "/loki/api/v1/push"
GZIP_LEVEL = 1  # lines compress ~10x even at level 1; higher levels cost CPU for little
log = logging.getLogger(__name__)


class Answer(NamedTuple):
    status: int | None  # None: connection error, timeout, nothing to push to yet
    retry_after: float | None = None
    detail: str = ""

    @property
    def ok(self) -> bool:
        return self.status is not None and 200 <= self.status < 300


class DirectLoki:
    def __init__(self, base_url: str, config: Config):
        self.url = base_url.rstrip("/") + PUSH_PATH
        self.timeout_s = config.request_timeout_sec
        self.session = requests.Session()
        # Per request, not on the session: requests lets REQUESTS_CA_BUNDLE/CURL_CA_BUNDLE in
        # the environment override a session's verify (even VERIFY_TLS=false or CA_BUNDLE).
        self.verify = config.tls_verify()
        self.session.headers.update({
            "User-Agent": f"faden-agent/{__version__}",
            "Content-Type": "application/json",
            "Content-Encoding": "gzip",
        })

    def __str__(self) -> str:  # shown in status, heartbeats and logs: no user:key@
        return redact_url(self.url) or ""

    def send(self, payload: bytes) -> Answer:
        body = gzip.compress(payload, compresslevel=GZIP_LEVEL)
        try:
            reply = self.session.post(self.url, data=body, timeout=self.timeout_s, verify=self.verify)
        except requests.RequestException as exc:
            return Answer(None, None, f"{exc.__class__.__name__}: {exc}"[:300])
        with reply:
            detail = "" if reply.ok else reply.text[:300].strip()
            return Answer(reply.status_code, parse_retry_after(reply.headers.get("Retry-After")), detail)

    def close(self) -> None:
        self.session.close()


class ThroughBackend:
    """Pushes through the backend's own push endpoint (same Loki body, same answers)."""

    def __init__(self, client: BackendClient, path: str):
        self.client = client
        self.path = path

    def __str__(self) -> str:
        return f"{self.client.base_url}{self.path}"

    def send(self, payload: bytes) -> Answer:
        try:
            self.client.push_logs(payload, path=self.path)
        except BackendError as exc:  # a refusal's own words (Loki's, passed on) decide what a 400 means
            return Answer(exc.status, exc.retry_after, getattr(exc, "detail", "") or str(exc))
        return Answer(204)

    def close(self) -> None:
        self.client.close()


class ViaBackend:
    """Asks the backend where to push, and asks again after any failed push."""

    def __init__(self, config: Config):
        self.config = config
        self.current: DirectLoki | ThroughBackend | None = None

    def __str__(self) -> str:
        return str(self.current) if self.current else f"{self.config.backend_url} (asking where to push)"

    def send(self, payload: bytes) -> Answer:
        if self.current is None:
            failure = self._resolve()
            if failure is not None:
                return failure
        assert self.current is not None
        answer = self.current.send(payload)
        if not answer.ok and answer.status not in (400, 413):
            self.close()  # re-ask before the next try: the backend may have moved us
        return answer

    def _resolve(self) -> Answer | None:
        try:
            state = load_state(self.config.state_path)
        except StateError as exc:
            return Answer(None, None, str(exc))
        if state is None:
            return Answer(None, None, "not enrolled yet: no credential to ask the backend where to push")
        client = BackendClient(self.config, state.credential)
        try:
            target = client.log_target()
        except BackendError as exc:
            client.close()
            return Answer(exc.status, exc.retry_after, f"asking where to push logs: {exc}")
        if target["mode"] == "loki":
            client.close()
            self.current = DirectLoki(target["url"], self.config)
        else:
            self.current = ThroughBackend(client, target["path"])
        log.info("logs: the backend says to push to %s", self.current)
        return None

    def close(self) -> None:
        if self.current is not None:
            self.current.close()
            self.current = None


def make_target(config: Config) -> DirectLoki | ViaBackend:
    return DirectLoki(config.loki_url, config) if config.loki_url else ViaBackend(config)
