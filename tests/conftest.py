"""Shared fixtures. Tests that need the Docker engine use the `docker_client` fixture (the
machine's engine, or a real Engine 29 under FADEN_TEST_ENGINE=29; `engine29`: one beside
it): it skips when no engine answers, except under FADEN_TEST_REQUIRE_DOCKER=1 (set by
.ci/run), where a missing engine fails the test so a broken install step cannot pass."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.support import agentproc
from tests.support.agentproc import AgentProcess, agent_env

REGISTRY = os.environ.get("FADEN_TEST_REGISTRY", "127.0.0.1:5000")
TEST_IMAGE = "faden-test/busybox:1"
# The engine the Docker tests run against: "20.10" (the machine's own) or "29" (a real
# Engine 29 of each test process; .ci/run runs a chosen set of modules so a second time).
ENGINE_UNDER_TEST = os.environ.get("FADEN_TEST_ENGINE", "20.10")


def require(what: str, reason: str) -> None:
    if os.environ.get("FADEN_TEST_REQUIRE_DOCKER") == "1":
        pytest.fail(f"{what} is required under .ci/run but {reason}")
    pytest.skip(f"{what}: {reason}")


# Modules whose tests take a minute or more (their own builds and images included), run
# first: xdist hands out tests in order, and a long one started last keeps CI waiting alone.
# The unit tests, short, fill in at the end. Paths are relative to this directory.
LONG_FIRST = (
    "integration/service/test_systemd_e2e.py",
    "integration/service/test_systemd_conventions.py",
    "integration/service/test_readme_newcomer.py",
    "integration/service/test_standalone_binary.py",
    "integration/logs/test_logs_container_lifecycle.py",
    "integration/logs/test_logs_agent.py",
    "integration/devbackend/test_admin_follow.py",
    "integration/logs/test_logs_hostile_mount.py",
    "integration/executor/test_executor_reconcile.py",
    "integration/peer/test_hostile_peers.py",
    "integration/peer/test_peer_port_attacks.py",
    "integration/inventory/test_stall_capture.py",
)
TESTS = Path(__file__).resolve().parent


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    agentproc.STARTED.clear()  # the agents of the test about to run, its fixtures' included


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo):
    """A failed test's report ends with the end of the log of each agent it started: what the
    agent did while the test waited is what a failure seen once on a loaded machine needs."""
    outcome = yield
    report = outcome.get_result()
    if report.when == "call" and report.failed:
        for agent in agentproc.STARTED:
            tail = agent.log_text()[-agentproc.LOG_IN_REPORT_CHARS :]
            report.sections.append((f"end of {agent.log_path.name} ({agent.log_path.parent.name})", tail))


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    def rank(item: pytest.Item) -> tuple[int, int]:
        try:
            where = item.path.resolve().relative_to(TESTS)
        except ValueError:  # a test outside tests/, named on the command line
            return (1, 0)
        if where.as_posix() in LONG_FIRST:
            return (0, LONG_FIRST.index(where.as_posix()))
        return (2, 0) if where.parts[0] == "unit" else (1, 0)

    items.sort(key=rank)  # stable: the order within each rank stays the collected one


@pytest.fixture(scope="session")
def host_docker_client():
    """The machine's own engine (Docker 20.10 in CI), where the test image is built."""
    import docker

    try:
        client = docker.from_env(timeout=30)
        client.ping()
    except Exception as exc:  # noqa: BLE001 - any failure means no engine
        require("the Docker engine", f"it does not answer ({exc}); run tests/infra/start-services.sh")
    try:
        client.images.get(TEST_IMAGE)
    except Exception:  # noqa: BLE001
        require("the test image", f"{TEST_IMAGE} is missing; run tests/infra/start-services.sh")
    return client


@pytest.fixture(scope="session")
def docker_client(host_docker_client, request):
    """The engine under test: the machine's own, or under FADEN_TEST_ENGINE=29 a real Engine
    29 (the `engine29` fixture), which DOCKER_HOST then names for this test process: the
    agents it starts and the docker CLI (at API 1.44, which the 20.10 CLI speaks) go there."""
    if ENGINE_UNDER_TEST != "29":
        yield host_docker_client
        return
    from tests.support.engine29 import CLI_API_VERSION

    engine = request.getfixturevalue("engine29")
    saved = {key: os.environ.get(key) for key in ("DOCKER_HOST", "DOCKER_API_VERSION")}
    os.environ.update(DOCKER_HOST=engine.host, DOCKER_API_VERSION=CLI_API_VERSION)
    client = engine.client()
    yield client
    client.close()
    for key, value in saved.items():
        if value is None:
            os.environ.pop(key, None)
        else:
            os.environ[key] = value


@pytest.fixture(scope="session")
def registry(docker_client) -> str:
    import requests

    try:
        requests.get(f"http://{REGISTRY}/v2/", timeout=5).raise_for_status()
    except Exception as exc:  # noqa: BLE001
        require("the registry", f"{REGISTRY} does not answer ({exc})")
    return REGISTRY


@pytest.fixture(scope="session")
def engine29(host_docker_client, tmp_path_factory):
    """A real Docker Engine 29.1.5 holding the test image, one per test process (each xdist
    worker its own): tests/support/engine29.py. Missing pieces skip, or fail under .ci/run."""
    from tests.support.engine29 import Engine29, missing_piece

    why = missing_piece()
    if why:
        require("Docker Engine 29", why)
    engine = Engine29(tmp_path_factory.mktemp("engine29"))
    try:
        engine.start()
    except Exception as exc:  # noqa: BLE001 - any failure to start means no engine
        engine.close()
        require("Docker Engine 29", f"it did not start ({exc})")
    yield engine
    engine.close()


@pytest.fixture
def env(tmp_path: Path) -> dict[str, str]:
    return agent_env(tmp_path)


@pytest.fixture
def agent_factory(tmp_path: Path):
    """Start real agents; every one is stopped (and its group killed) after the test."""
    started: list[AgentProcess] = []

    def make(env: dict[str, str] | None = None, **kwargs) -> AgentProcess:
        agent = AgentProcess(env or agent_env(tmp_path), tmp_path / f"agent-{len(started)}.log", **kwargs)
        started.append(agent)
        return agent

    yield make
    for agent in started:
        agent.stop()
        agent.kill()
