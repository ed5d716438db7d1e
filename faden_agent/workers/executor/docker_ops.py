"""The Docker SDK calls of the executor, each bounded, each failure -> CommandFailed(reason)."""

from __future__ import annotations

import contextlib
import os
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import docker
import requests
from docker.errors import APIError, DockerException, ImageNotFound, NotFound
from docker.types import LogConfig, Mount, Ulimit
from docker.utils import parse_repository_tag
from docker.utils.json_stream import json_stream

from faden_agent import protocol
from faden_agent.common.dockerclient import make_client
from faden_agent.common.errorline import error_line
from faden_agent.common.failure import Cancelled, Failure
from faden_agent.config import Config
from faden_agent.workers.executor import docker_errors
from faden_agent.workers.executor.bind_paths import SHM, Bind
from faden_agent.workers.executor.gpu import GPU_ADVICE, device_requests, gpu_failure

PROGRESS_INTERVAL_S = 1.0
CAPPED_LOG_DRIVERS = ("json-file", "local")  # the drivers that take max-size and max-file


class CommandFailed(Failure):
    def __init__(self, reason: str, message: str, **result: Any):
        super().__init__(reason, message)
        self.result = result


def _engine_text(exc: APIError) -> str:
    return str(exc.explanation or exc).strip()


@contextlib.contextmanager
def translated(what: str, not_found: str = "not_found", image: str | None = None) -> Iterator[None]:
    """Map Docker SDK and transport errors to a reason and a one-line message (`image`: the
    one being fetched, so registry failures get their own reasons; see docker_errors)."""
    try:
        yield
    except CommandFailed:
        raise
    except (requests.exceptions.Timeout, TimeoutError) as exc:
        raise CommandFailed(
            "timeout", f"{what}: the Docker engine did not answer in time ({type(exc).__name__})"
        ) from None
    except requests.exceptions.ConnectionError as exc:
        if "Read timed out" in str(exc):
            raise CommandFailed("timeout", f"{what}: the Docker engine did not answer in time") from None
        if docker_errors.is_permission_denied(exc):
            raise CommandFailed(
                docker_errors.DOCKER_PERMISSION,
                f"{what}: {docker_errors.advice(docker_errors.DOCKER_PERMISSION)} ({error_line(exc, 300)})",
            ) from None
        raise CommandFailed(
            "docker_unavailable", f"{what}: cannot reach the Docker engine ({error_line(exc, 300)})"
        ) from None
    except (ImageNotFound, NotFound) as exc:
        raise CommandFailed(*docker_errors.failure(what, _engine_text(exc), not_found, image)) from None
    except APIError as exc:
        text = _engine_text(exc)
        gpu_reason = gpu_failure(text)
        if gpu_reason:
            raise CommandFailed(
                gpu_reason, f"{what}: GPUs were requested but {GPU_ADVICE[gpu_reason]} ({text})"
            ) from None
        if exc.status_code == 409:
            raise CommandFailed("conflict", f"{what}: {text}") from None
        if exc.status_code in (401, 403) or "unauthorized" in text or "authentication required" in text:
            raise CommandFailed(
                "registry_auth_failed", f"{what}: the registry refused the credentials ({text})"
            ) from None
        raise CommandFailed(*docker_errors.failure(what, text, "docker_error", image)) from None
    except DockerException as exc:
        raise CommandFailed("docker_unavailable", f"{what}: {error_line(exc, 300)}") from None


def split_image(image: str) -> tuple[str, str]:
    repo, tag = parse_repository_tag(image)
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
        self._local = threading.local()  # one client per thread: requests sessions are not shared safely

    @property
    def client(self) -> docker.DockerClient:
        client = getattr(self._local, "client", None)
        if client is None:
            with translated("connecting to the Docker engine"):
                client = make_client(self.docker_host, timeout_s=self.timeout_s)
            self._local.client = client
        return client

    def ping(self) -> bool:
        try:
            return bool(self.client.ping())
        except Exception:  # noqa: BLE001 - any failure means "not reachable now"
            return False

    # --- images

    def has_image(self, image: str) -> bool:
        with translated(f"looking up image {image}"):
            try:
                self.client.images.get(image)
                return True
            except ImageNotFound:
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
            pulled = self.client.images.get(image)
        on_progress(progress.figures())
        return {"image": image, "image_id": pulled.id, "digests": pulled.attrs.get("RepoDigests", [])}

    def remove_image(self, image: str, force: bool) -> dict[str, Any]:
        with translated(f"removing image {image}"):
            try:
                self.client.images.remove(image, force=force)
            except ImageNotFound:
                return {"image": image, "already_absent": True}
        return {"image": image, "already_absent": False}

    # --- containers

    def find(self, name: str):
        """The container of exactly that name (or full id), or None. The engine's own lookup
        falls back to an ID prefix, so `cafe` would find whatever container's ID starts with
        cafe: what it returns is checked here."""
        with translated(f"looking up container {name}"):
            try:
                container = self.client.containers.get(name)
            except NotFound:
                return None
        return container if name in (container.name, container.id) else None

    def running_containers(self) -> list:
        """Every running container of the engine (managed or not), inspected."""
        with translated("listing running containers"):
            return self.client.containers.list()

    def managed_containers(self) -> list:
        with translated("listing managed containers"):
            return self.client.containers.list(all=True, filters=protocol.MANAGED_FILTER)

    def binds(self) -> list[Bind]:
        """What every container of the engine mounts from the host: its bind sources (resolved)
        and, with ipc_mode host, the host's /dev/shm; the host policy's view of who writes where."""
        with translated("listing the containers' bind mounts"):
            containers = self.client.containers.list(all=True, ignore_removed=True)
        binds = []
        for container in containers:
            for mount in container.attrs.get("Mounts") or []:
                if mount.get("Type") == "bind" and isinstance(mount.get("Source"), str) and mount["Source"]:
                    binds.append(Bind(container.name, os.path.realpath(mount["Source"]), bool(mount.get("RW"))))
            if (container.attrs.get("HostConfig") or {}).get("IpcMode") == "host":
                binds.append(Bind(container.name, SHM, True))
        return binds

    def create(self, spec: dict[str, Any], labels: dict[str, str], extra_mounts: list[dict[str, Any]]):
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
            return self.client.containers.create(**kwargs)

    def log_config(self) -> LogConfig | None:
        """The engine's default log driver with the size cap, where the driver takes one
        (json-file, local); another driver (journald, syslog, ...) is left as it is."""
        if self._log_driver is None:
            with translated("asking the Docker engine for its log driver"):
                self._log_driver = str(self.client.info().get("LoggingDriver") or "json-file")
        if self._log_driver not in CAPPED_LOG_DRIVERS:
            return None
        return LogConfig(type=self._log_driver, config=self.log_cap)

    def start(self, container) -> None:
        with translated(f"starting container {container.name}"):
            container.start()

    def stop(self, container, timeout_s: int) -> None:
        with translated(f"stopping container {container.name}"):
            container.stop(timeout=timeout_s)

    def restart(self, container, timeout_s: int) -> None:
        with translated(f"restarting container {container.name}"):
            container.restart(timeout=timeout_s)

    def remove(self, container, force: bool = True, volumes: bool = False) -> None:
        with translated(f"removing container {container.name}"):
            try:
                container.remove(force=force, v=volumes)
            except NotFound:
                pass

    def reload(self, container) -> dict[str, Any]:
        with translated(f"inspecting container {container.name}"):
            container.reload()
        return container.attrs

    def logs_tail(self, container, lines: int = 5) -> str:
        try:
            with translated("reading logs"):
                return container.logs(tail=lines).decode(errors="replace").strip()
        except CommandFailed:
            return ""


def _pull_error(image: str, text: str) -> CommandFailed:
    lowered = text.lower()
    if docker_errors.NO_SPACE_TEXT in lowered or docker_errors.engine_reason(text):
        return CommandFailed(*docker_errors.failure(f"pulling {image}", text, "docker_error", image))
    if "unauthorized" in lowered or "authentication required" in lowered or "denied" in lowered:
        return CommandFailed("registry_auth_failed", f"pulling {image}: the registry refused the credentials ({text})")
    return CommandFailed("docker_error", f"pulling {image}: {text}")
