"""The agent under a real systemd keeps the host's conventions: its errors at
priority err in the journal and level="error" in Loki; the hardened unit (NotifyAccess=main,
a system-call deny list, a reduced capability set...) still lets it reach Docker, the
journal, NVML (tests/nvml's library) and Ray's directories; a bad setting is not restarted;
a CA only in the system's store is trusted with no variable set."""

from __future__ import annotations

import re
import shutil
import subprocess
import uuid
from pathlib import Path

import orjson
import pytest

from faden_agent import protocol
from tests.conftest import TEST_IMAGE
from tests.nvml.state import GpuState
from tests.support.agentproc import wait_for
from tests.support.backendproc import AdminError, BackendProcess
from tests.support.lokireceiver import LokiReceiver
from tests.support.privateca import make_ca_and_server_cert
from tests.support.systemdctr import SystemdContainer
from tests.support.systemdinstall import (  # noqa: F401  (fixtures)
    UNIT,
    current_build,
    image,
    install_env,
    offer,
    run_install_line,
)

pytestmark = [pytest.mark.docker, pytest.mark.systemd]

EXPOSURE_BEFORE = 6.6  # `systemd-analyze security` of the unit before its hardening: the bar to stay under
UNREACHABLE_METRICS = "192.0.2.1:9"  # TEST-NET-1: cannot be bound, the agent logs an error and runs on
DROP_IN_DIR = "/etc/systemd/system/faden-agent.service.d"


def exposure(box: SystemdContainer) -> float:
    out = box.sh(f"systemd-analyze security {UNIT} --no-pager").stdout
    return float(re.search(r"Overall exposure level for faden-agent.service: ([0-9.]+)", out).group(1))


def inventory_text(backend: BackendProcess, node_id: str) -> str:
    try:
        return orjson.dumps(backend.inventory(node_id)).decode()
    except AdminError:  # none received yet
        return ""


def test_journal_priorities_hardened_unit_and_system_trust(image, current_build, tmp_path, docker_client):
    downloads = tmp_path / "downloads"
    offer(downloads, current_build)
    ca, cert, key = make_ca_and_server_cert(tmp_path)
    backend = BackendProcess(
        tmp_path / "data", tmp_path / "backend.log", tls_cert=cert, tls_key=key, ca_bundle=ca, downloads=downloads
    )
    backend.start()
    gpus = GpuState(tmp_path / "nvml", count=1)
    gpus.write()
    # Below neither /tmp nor /var/tmp (the unit has PrivateTmp), wherever the checkout lies.
    ray_dir = Path("/srv/faden-test") / f"ray-{uuid.uuid4().hex[:8]}"
    ray_dir.mkdir(parents=True)
    agent_id = "sdh-" + uuid.uuid4().hex[:8]
    name = f"faden-test-sdh-{uuid.uuid4().hex[:8]}"
    try:
        # Ray's directories at the same path inside and outside: the host's dockerd mounts them.
        with (
            LokiReceiver(version="3") as loki,
            SystemdContainer(image, extra_args=["-v", f"{ray_dir}:{ray_dir}"]) as box,
        ):
            # The test CA goes into the box's system store only: no CA variable anywhere.
            box.sh(
                'printf "%s\\n" "$CA_PEM" > /usr/local/share/ca-certificates/faden-test.crt && update-ca-certificates',
                env={"CA_PEM": ca.read_text().strip()},
            )
            subprocess.run(["docker", "cp", str(gpus.library), f"{box.name}:/usr/lib/libnvidia-ml.so.1"], check=True)
            subprocess.run(["docker", "cp", str(gpus.path), f"{box.name}:/etc/fake-nvml.json"], check=True)
            box.sh(
                f"mkdir -p {DROP_IN_DIR} && printf '[Service]\\nEnvironment=FADEN_FAKE_NVML_STATE=%s\\n' "
                f"/etc/fake-nvml.json > {DROP_IN_DIR}/nvml.conf"
            )
            env = install_env(backend, agent_id, backend.mint_token())
            del env["FADEN_AGENT_ALLOW_HTTP"]  # https all the way, the download included
            env.update(
                FADEN_NODE_AGENT_LOKI_URL=loki.url,
                FADEN_NODE_AGENT_LOG_FLUSH_INTERVAL_SEC="0.5",
                FADEN_NODE_AGENT_METRICS_ADDR=UNREACHABLE_METRICS,
                FADEN_NODE_AGENT_RAY_LOG_DIR=str(ray_dir),
            )
            assert backend.url.startswith("https://") and not any("CA_BUNDLE" in k for k in env)
            run_install_line(box, env)
            node = backend.wait_node(agent_id, heartbeats=1, timeout_s=60)  # trusted through the system store
            assert "CA_BUNDLE" not in box.sh("cat /etc/faden-agent/agent.env").stdout

            # The agent's error is at priority err in the journal, its info lines are not.
            errors = wait_for(
                lambda: (
                    "metrics endpoint" in (out := box.sh(f"journalctl -p err -u {UNIT} --no-pager -o cat").stdout)
                    and out
                ),
                30,
                what="the error at priority err",
            )
            assert "enrolled with" not in errors and "is RUNNING" not in errors, errors
            assert "enrolled with" in box.journal(UNIT)
            # ... and its Loki entry says level="error" (the shipper reads the journal's PRIORITY).
            shipped = loki.wait_for(
                lambda entries: [e for e in entries if "metrics endpoint" in e.line and "faden-agent" in e.line], 60
            )
            assert {e.labels.get("level") for e in shipped} == {"error"}, [e.labels for e in shipped]
            running = loki.wait_for(lambda entries: [e for e in entries if "is RUNNING (pid" in e.line], 30)
            assert {e.labels.get("level") for e in running} == {"info"}

            # NotifyAccess=main: what the workers start (the logs worker's journalctl) has no NOTIFY_SOCKET.
            tools = box.sh("for p in $(pgrep -x journalctl); do tr '\\0' '\\n' < /proc/$p/environ; echo; done").stdout
            assert "FADEN_NODE_AGENT_" in tools and "NOTIFY_SOCKET" not in tools and "WATCHDOG_USEC" not in tools
            shown = box.sh(
                f"systemctl show {UNIT} -p NotifyAccess -p RestartPreventExitStatus -p ProtectKernelLogs"
            ).stdout
            assert "NotifyAccess=main" in shown and "RestartPreventExitStatus=2" in shown, shown
            score = exposure(box)
            print(f"\nsystemd-analyze security: {EXPOSURE_BEFORE} before, {score} now")
            assert score < EXPOSURE_BEFORE - 2

            # NVML through the hardened unit: the fake library's GPU is in the inventory.
            wait_for(
                lambda: "GPU-00000000-fake" in inventory_text(backend, node["node_id"]),
                60,
                interval_s=0.5,
                what="the GPU in the inventory",
            )
            # Docker and Ray's directory (chown to the container's user) through the hardened unit.
            spec = {
                "name": name,
                "image": TEST_IMAGE,
                "user": "1000:100",
                "ray": True,
                "command": ["sh", "-c", f"echo written > {protocol.RAY_LOG_MOUNT}/proof.log && sleep 300"],
            }
            ran = backend.wait_command(backend.send_command(node["node_id"], "container.run", spec), timeout_s=60)
            assert ran["state"] == "succeeded", orjson.dumps(ran).decode()
            proof = ray_dir / name / "proof.log"
            wait_for(proof.exists, 30, what="the Ray container's file")
            assert ((ray_dir / name).stat().st_uid, proof.stat().st_uid) == (1000, 1000)

            # A bad setting exits 2: systemd does not restart it, the journal says why at err
            # (one the environment file does not set: its values win over a drop-in's Environment=).
            box.sh(
                f"printf '[Service]\\nEnvironment=FADEN_NODE_AGENT_LOG_BATCH_SIZE=many\\nRestartSec=1\\n'"
                f" > {DROP_IN_DIR}/bad.conf && systemctl daemon-reload"
            )
            box.sh(f"systemctl restart {UNIT}", check=False)
            wait_for(lambda: box.show(UNIT)["ActiveState"] == "failed", 30, what="the unit failed")
            before = box.show(UNIT)["NRestarts"]
            still = box.sh(f"sleep 4; systemctl show {UNIT} -p ActiveState -p NRestarts -p ExecMainStatus").stdout
            assert "ActiveState=failed" in still and f"NRestarts={before}" in still and "ExecMainStatus=2" in still
            bad = box.sh(f"journalctl -p err -u {UNIT} --no-pager -o cat").stdout
            assert "FADEN_NODE_AGENT_LOG_BATCH_SIZE='many' is not allowed" in bad
    finally:
        for leftover in docker_client.containers.list(all=True, filters={"name": name}):
            leftover.remove(force=True)
        backend.stop()
        shutil.rmtree(ray_dir, ignore_errors=True)
