"""The executor's Docker calls, each bounded, each failure -> CommandFailed(reason): what it
reads through engine/client.py (shared by its threads), what it changes (create, start, stop,
remove, pull) through the Docker SDK, loaded with the first command that needs it."""

from __future__ import annotations

import contextlib
import os
import sys
import threading
import time
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

from faden_agent import protocol
from faden_agent.common.errorline import error_line
from faden_agent.common.failure import Cancelled, Failure
from faden_agent.config import Config
from faden_agent.engine import containers
from faden_agent.engine.client import EngineClient
from faden_agent.engine.containers import Container
from faden_agent.engine.errors import ApiError, EngineError, EngineUnreachable, NotFound
from faden_agent.workers.executor import docker_errors
from faden_agent.workers.executor.bind_paths import SHM, Bind
from faden_agent.workers.executor.gpu import GPU_ADVICE, device_requests, gpu_failure

if TYPE_CHECKING:
    import docker
    from docker.types import LogConfig

PROGRESS_INTERVAL_S = 1.0
CAPPED_LOG_DRIVERS = ("json-file", "local")  # the drivers that take max-size and max-file
LOGS_TAIL_BYTES = 64 << 10  # of a failed container's last lines, for its message


_sdk_lock = threading.Lock()
_sdk_loaded = threading.Event()


def load_sdk() -> None:
    """Loads the Docker SDK (with requests) whole, once, under a lock, before any command code
    imports a part of it: two threads importing it at once meet its modules half made (an
    ImportError "most likely due to a circular import")."""
    if _sdk_loaded.is_set():
        return
    with _sdk_lock:
        import docker.auth  # noqa: F401 - the parts the commands import by name
        import docker.types  # noqa: F401
        import docker.utils.json_stream  # noqa: F401
        import requests  # noqa: F401

        import faden_agent.engine.sdk  # noqa: F401

        _sdk_loaded.set()


class CommandFailed(Failure):
    def __init__(self, reason: str, message: str, **result: Any):
        super().__init__(reason, message)
        self.result = result


@contextlib.contextmanager
def translated(what: str, not_found: str = "not_found", image: str | None = None) -> Iterator[None]:
    """Map the engine's errors (engine/errors.py, and the Docker SDK's once loaded) to a reason
    and a one-line message (`image`: the one being fetched, so registry failures get their own
    reasons; see docker_errors)."""
    try:
        yield
    except CommandFailed:
        raise
    except Exception as exc:
        failure = _failure(what, exc, not_found, image)
        if failure is None:
            raise
        raise failure from None


def _failure(what: str, exc: Exception, not_found: str, image: str | None) -> CommandFailed | None:
    # The SDK not loaded (or loading on another thread): no SDK error can have been raised.
    sdk_errors = sys.modules["docker.errors"] if _sdk_loaded.is_set() else None
    transport = sys.modules["requests.exceptions"] if _sdk_loaded.is_set() else None
    timed_out = isinstance(exc, TimeoutError) or (isinstance(exc, EngineUnreachable) and exc.timed_out)
    if timed_out or (transport is not None and isinstance(exc, transport.Timeout)):
        return CommandFailed("timeout", f"{what}: the Docker engine did not answer in time ({type(exc).__name__})")
    if isinstance(exc, EngineUnreachable) or (transport is not None and isinstance(exc, transport.ConnectionError)):
        if "Read timed out" in str(exc):
            return CommandFailed("timeout", f"{what}: the Docker engine did not answer in time")
        if docker_errors.is_permission_denied(exc):
            return CommandFailed(
                docker_errors.DOCKER_PERMISSION,
                f"{what}: {docker_errors.advice(docker_errors.DOCKER_PERMISSION)} ({error_line(exc, 300)})",
            )
        cause = exc.__cause__ if isinstance(exc, EngineUnreachable) and exc.__cause__ else exc
        return CommandFailed("docker_unavailable", f"{what}: cannot reach the Docker engine ({error_line(cause, 300)})")
    if isinstance(exc, ApiError):
        return _api_failure(what, exc.status_code, exc.explanation or str(exc), not_found, image)
    if sdk_errors is not None and isinstance(exc, sdk_errors.APIError):
        return _api_failure(what, exc.status_code or 0, str(exc.explanation or exc).strip(), not_found, image)
    if isinstance(exc, EngineError) or (sdk_errors is not None and isinstance(exc, sdk_errors.DockerException)):
        return CommandFailed("docker_unavailable", f"{what}: {error_line(exc, 300)}")
    return None


def _api_failure(what: str, status: int, text: str, not_found: str, image: str | None) -> CommandFailed:
    if status == 404:
        return CommandFailed(*docker_errors.failure(what, text, not_found, image))
    gpu_reason = gpu_failure(text)
    if gpu_reason:
        return CommandFailed(gpu_reason, f"{what}: GPUs were requested but {GPU_ADVICE[gpu_reason]} ({text})")
    if status == 409:
        return CommandFailed("conflict", f"{what}: {text}")
    if status in (401, 403) or "unauthorized" in text or "authentication required" in text:
        return CommandFailed("registry_auth_failed", f"{what}: the registry refused the credentials ({text})")
    return CommandFailed(*docker_errors.failure(what, text, "docker_error", image))


def split_image(image: str) -> tuple[str, str]:
    repo, tag = docker_errors.repository_and_tag(image)
    return repo, tag or "latest"


class PullProgress:
    """Bytes done/total over all layers from the engine's pull messages."""

    def __init__(self) -> None:
        self.layers: dict[str, list[int]] = {}  # layer id -> [done, total]

    LAYER_STATUSES = (
        "Pulling fs layer",
        "Waiting",
        "Downloading",
        "Verifying Checksum",
        "Download complete",
        "Extracting",
        "Pull complete",
        "Already exists",
    )

    def update(self, line: dict[str, Any]) -> None:
        layer, status = line.get("id"), line.get("status", "")
        if not layer or status not in self.LAYER_STATUSES:  # e.g. "Pulling from repo" carries the tag as id
            return
        detail = line.get("progressDetail") or {}
        entry = self.layers.setdefault(layer, [0, 0])
        if status == "Downloading" and detail.get("total"):
            entry[0], entry[1] = int(detail.get("current", 0)), int(detail["total"])
        elif status in ("Download complete", "Verifying Checksum", "Pull complete", "Already exists"):
            entry[0] = entry[1]

    def figures(self) -> dict[str, int]:
        return {
            "bytes_done": sum(d for d, _ in self.layers.values()),
            "bytes_total": sum(t for _, t in self.layers.values()),
            "layers": len(self.layers),
        }


class DockerOps:
    def __init__(self, config: Config):
        self.docker_host = config.docker_host
        self.timeout_s = config.docker_timeout_sec
        self.log_cap = {"max-size": config.container_log_max_size, "max-file": str(config.container_log_max_files)}
        self._log_driver: str | None = None
        self._local = threading.local()  # one SDK client per thread: requests sessions are not shared safely
        self._engine: EngineClient | None = None
        self._lock = threading.Lock()

    @property
    def engine(self) -> EngineClient:
        """The reads' client, one for every thread (each keeps a connection of its own)."""
        if self._engine is None:
            with self._lock, translated("connecting to the Docker engine"):
                if self._engine is None:
                    self._engine = EngineClient(self.docker_host, self.timeout_s)
        return self._engine

    @property
    def client(self) -> docker.DockerClient:
        """The Docker SDK's client of this thread, for what changes the engine (loaded at first use)."""
        client = getattr(self._local, "client", None)
        if client is None:
            load_sdk()
            with translated("connecting to the Docker engine"):
                from faden_agent.engine.sdk import make_client

                client = make_client(self.docker_host, timeout_s=self.timeout_s)
            self._local.client = client
        return client

    def ping(self) -> bool:
        try:
            return self.engine.ping()
        except Exception:  # noqa: BLE001 - any failure means "not reachable now"
            return False

    # --- images

    def has_image(self, image: str) -> bool:
        with translated(f"looking up image {image}"):
            try:
                self.engine.inspect_image(image)
                return True
            except NotFound:
                return False

    def pull(
        self,
        image: str,
        auth: dict[str, str] | None,
        on_progress: Callable[[dict[str, int]], None],
        on_abort: Callable[[Callable[[], None]], None],
        should_stop: Callable[[], bool],
    ) -> dict[str, Any]:
        """Pull with progress at most once a second. The request goes through the SDK's
        low-level helpers because `APIClient.pull` sets no read timeout and hides the
        response, which we need to bound a hung engine and to abort on cancel."""
        load_sdk()
        import docker.auth
        import requests
        from docker.utils.json_stream import json_stream

        repo, tag = split_image(image)
        api = self.client.api
        headers = {"X-Registry-Auth": docker.auth.encode_header(auth)} if auth else {}
        progress = PullProgress()
        last_report = 0.0
        with translated(f"pulling {image}", not_found="image_not_found", image=image):
            response = api._post(
                api._url("/images/create"),
                params={"fromImage": repo, "tag": tag},
                headers=headers,
                stream=True,
                timeout=self.timeout_s,
            )
            on_abort(response.close)
            try:
                api._raise_for_status(response)
                for line in json_stream(api._stream_helper(response, False)):
                    if should_stop():
                        raise Cancelled()
                    if "error" in line:
                        raise _pull_error(image, line["error"])
                    progress.update(line)
                    now = time.monotonic()
                    if now - last_report >= PROGRESS_INTERVAL_S:
                        last_report = now
                        on_progress(progress.figures())
            except (requests.exceptions.ChunkedEncodingError, AttributeError, ValueError):
                if should_stop():
                    raise Cancelled() from None
                raise
            finally:
                response.close()
            if should_stop():
                raise Cancelled()
            pulled = self.engine.inspect_image(image)
        on_progress(progress.figures())
        return {"image": image, "image_id": pulled.get("Id"), "digests": pulled.get("RepoDigests") or []}

    def remove_image(self, image: str, force: bool) -> dict[str, Any]:
        with translated(f"removing image {image}"):
            try:
                self.client.api.remove_image(image, force=force)
            except Exception as exc:
                if getattr(exc, "status_code", None) == 404:
                    return {"image": image, "already_absent": True}
                raise
        return {"image": image, "already_absent": False}

    # --- containers

    def find(self, name: str) -> Container | None:
        """The container of exactly that name (or full id), or None. The engine's own lookup
        falls back to an ID prefix, so `cafe` would find whatever container's ID starts with
        cafe: what it returns is checked here."""
        with translated(f"looking up container {name}"):
            try:
                container = containers.get(self.engine, name)
            except NotFound:
                return None
        return container if name in (container.name, container.id) else None

    def running_containers(self) -> list[Container]:
        """Every running container of the engine (managed or not), inspected."""
        with translated("listing running containers"):
            return containers.listed(self.engine)

    def managed_containers(self) -> list[Container]:
        with translated("listing managed containers"):
            return containers.listed(self.engine, all=True, filters=protocol.MANAGED_FILTER)

    def binds(self) -> list[Bind]:
        """What every container of the engine mounts from the host: its bind sources (resolved)
        and, with ipc_mode host, the host's /dev/shm; the host policy's view of who writes where."""
        with translated("listing the containers' bind mounts"):
            every = containers.listed(self.engine, all=True, ignore_removed=True)
        binds = []
        for container in every:
            for mount in container.attrs.get("Mounts") or []:
                if mount.get("Type") == "bind" and isinstance(mount.get("Source"), str) and mount["Source"]:
                    binds.append(Bind(container.name, os.path.realpath(mount["Source"]), bool(mount.get("RW"))))
            if (container.attrs.get("HostConfig") or {}).get("IpcMode") == "host":
                binds.append(Bind(container.name, SHM, True))
        return binds

    def create(self, spec: dict[str, Any], labels: dict[str, str], extra_mounts: list[dict[str, Any]]) -> Container:
        load_sdk()
        from docker.types import Mount, Ulimit

        kwargs: dict[str, Any] = {
            "image": spec["image"],
            "name": spec["name"],
            "labels": labels,
            "detach": True,
            "environment": spec["env"],
            "ports": spec["ports"] or None,
            "mounts": [
                Mount(m["target"], m["source"], type=m["type"], read_only=m["read_only"])
                for m in spec["mounts"] + extra_mounts
            ]
            or None,
            "ulimits": [Ulimit(**u) for u in spec["ulimits"]] or None,
            "devices": spec["devices"] or None,
            "device_requests": device_requests(spec["gpus"]) or None,
            "log_config": self.log_config(),
            "cap_add": spec.get("cap_add") or None,
            "privileged": bool(spec.get("privileged")),
        }
        for key in (
            "command",
            "entrypoint",
            "network_mode",
            "ipc_mode",
            "shm_size",
            "restart_policy",
            "healthcheck",
            "user",
            "working_dir",
        ):
            if spec.get(key) is not None:
                kwargs[key] = spec[key]
        with translated(f"creating container {spec['name']}", not_found="image_not_found", image=spec["image"]):
            created = self.client.containers.create(**kwargs)  # the SDK inspects it: its attrs are whole
        return Container(self.engine, created.attrs)

    def log_config(self) -> LogConfig | None:
        """The engine's default log driver with the size cap, where the driver takes one
        (json-file, local); another driver (journald, syslog, ...) is left as it is."""
        if self._log_driver is None:
            with translated("asking the Docker engine for its log driver"):
                self._log_driver = str(self.engine.info().get("LoggingDriver") or "json-file")
        if self._log_driver not in CAPPED_LOG_DRIVERS:
            return None
        from docker.types import LogConfig

        return LogConfig(type=self._log_driver, config=self.log_cap)

    def start(self, container: Container) -> None:
        with translated(f"starting container {container.name}"):
            self.client.api.start(container.id)

    def stop(self, container: Container, timeout_s: int) -> None:
        with translated(f"stopping container {container.name}"):
            self.client.api.stop(container.id, timeout=timeout_s)

    def restart(self, container: Container, timeout_s: int) -> None:
        with translated(f"restarting container {container.name}"):
            self.client.api.restart(container.id, timeout=timeout_s)

    def remove(self, container: Container, force: bool = True, volumes: bool = False) -> None:
        with translated(f"removing container {container.name}"):
            try:
                self.client.api.remove_container(container.id, force=force, v=volumes)
            except Exception as exc:
                if getattr(exc, "status_code", None) != 404:  # gone already: what was asked
                    raise

    def reload(self, container: Container) -> dict[str, Any]:
        with translated(f"inspecting container {container.name}"):
            container.reload()
        return container.attrs

    def logs_tail(self, container: Container, lines: int = 5) -> str:
        try:
            with translated("reading logs"):
                return container.logs(tail=lines).read_all(LOGS_TAIL_BYTES).decode(errors="replace").strip()
        except CommandFailed:
            return ""


def _pull_error(image: str, text: str) -> CommandFailed:
    lowered = text.lower()
    if docker_errors.NO_SPACE_TEXT in lowered or docker_errors.engine_reason(text):
        return CommandFailed(*docker_errors.failure(f"pulling {image}", text, "docker_error", image))
    if "unauthorized" in lowered or "authentication required" in lowered or "denied" in lowered:
        return CommandFailed("registry_auth_failed", f"pulling {image}: the registry refused the credentials ({text})")
    return CommandFailed("docker_error", f"pulling {image}: {text}")
