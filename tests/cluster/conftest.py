"""Fixtures of the cluster rig (tests/cluster/rig.py, docs/cluster-rig.md).

    fixture `cluster_rig`: a started 3-machine rig (namespaces, engines, backend, agents),
        shared by the tests of one module (it takes seconds to start) and removed after
        them, also when a test failed.
    fixture `rig_factory`: factory(machines=3, **Rig options) -> a started Rig, removed
        after the test.

Rig tests carry the `cluster` marker: one rig at a time per host (fixed addresses), so
.ci/run runs them one after another in a chain beside its parallel part.
"""

from __future__ import annotations

import os
import shutil

import pytest

from tests.cluster.rig import Rig


def require_rig() -> None:
    missing = [tool for tool in ("ip", "tc", "nsenter", "dockerd", "ethtool") if shutil.which(tool) is None]
    reason = f"needs root and {', '.join(missing)}" if missing else ("needs root" if os.geteuid() else None)
    if reason:
        if os.environ.get("FADEN_TEST_REQUIRE_DOCKER") == "1":
            pytest.fail(f"the cluster rig {reason} (tests/infra/start-services.sh installs the tools)")
        pytest.skip(f"the cluster rig {reason}")


@pytest.fixture(scope="module")
def cluster_rig(request):
    require_rig()
    settings = getattr(request.module, "RIG_AGENT_SETTINGS", {})
    rig = Rig(3, agent_settings=settings)
    try:
        yield rig.start()
    finally:
        rig.stop()


@pytest.fixture
def rig_factory():
    require_rig()
    rigs: list[Rig] = []

    def make(machines: int = 3, **options) -> Rig:
        rig = Rig(machines, **options)
        rigs.append(rig)
        return rig.start()

    yield make
    for rig in rigs:
        rig.stop()
