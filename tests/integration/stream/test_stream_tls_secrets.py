"""TLS verification against a private CA, and secrets kept out of logs, ps, titles and
command lines. The CA and server certificate: tests/support/privateca.py."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import threading
from pathlib import Path

import orjson

from tests.support.agentproc import AgentProcess, agent_status, wait_for
from tests.support.backendproc import BackendProcess, agent_env_for, agent_on_backend, backend  # noqa: F401
from tests.support.privateca import make_ca_and_server_cert, without_ca_overrides


def test_unknown_ca_refused_right_ca_bundle_accepted(tmp_path):
    ca, cert, key = make_ca_and_server_cert(tmp_path)
    tls_backend = BackendProcess(tmp_path / "data", tmp_path / "backend.log", tls_cert=cert, tls_key=key, ca_bundle=ca)
    tls_backend.start()
    try:
        assert tls_backend.url.startswith("https://")
        refused_root = tmp_path / "refused"
        refused_root.mkdir()
        refused_env = without_ca_overrides(agent_env_for(tls_backend, refused_root, verify_tls="true"))
        refused = AgentProcess(refused_env, refused_root / "agent.log").start()
        try:
            report = wait_for(
                lambda: "TLS verification" in ((s := agent_status(refused_env))["last_error"] or "") and s,
                20,
                what="TLS refusal in status",
            )
            assert "CERTIFICATE_VERIFY_FAILED" in report["last_error"] or "verify" in report["last_error"]
            assert not report["enrolled"] and tls_backend.nodes() == []
        finally:
            refused.stop()
        accepted_root = tmp_path / "accepted"
        accepted_root.mkdir()
        accepted_env = without_ca_overrides(agent_env_for(tls_backend, accepted_root, ca_bundle=ca))
        # A stray REQUESTS_CA_BUNDLE (common in shells) must not replace the configured CA bundle.
        accepted_env["REQUESTS_CA_BUNDLE"] = str(tmp_path / "server.pem")
        with AgentProcess(accepted_env, accepted_root / "agent.log"):
            node = tls_backend.wait_node(accepted_env["FADEN_NODE_AGENT_AGENT_ID"], heartbeats=2)
            assert node["workers"]
        # VERIFY_TLS=false: the operator's explicit choice to trust any certificate.
        unverified_root = tmp_path / "unverified"
        unverified_root.mkdir()
        unverified_env = without_ca_overrides(agent_env_for(tls_backend, unverified_root, verify_tls="false"))
        with AgentProcess(unverified_env, unverified_root / "agent.log") as unverified:
            tls_backend.wait_node(unverified_env["FADEN_NODE_AGENT_AGENT_ID"], heartbeats=2)
            log_text = unverified.log_text()
        assert "TLS verification of https://127.0.0.1" in log_text and "is OFF" in log_text
        assert "InsecureRequestWarning" not in log_text  # one clear line, not a warning per request
    finally:
        tls_backend.stop()


def _all_cmdlines_and_titles() -> list[bytes]:
    texts = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        for name in ("cmdline", "comm"):
            try:
                texts.append((proc / name).read_bytes())
            except OSError:
                pass
    return texts


def test_token_and_credential_never_leak(backend, agent_on_backend, tmp_path):
    agent, node = agent_on_backend()
    token = agent.env["FADEN_NODE_AGENT_ENROLLMENT_TOKEN"]
    credential = orjson.loads((tmp_path / "agent0" / "state" / "state.json").read_bytes())["credential"]
    secrets = [token.encode(), credential.encode()]
    # Exercise the paths that log: errors, maintenance, a command, a reconnect.
    backend.admin.faults(maintenance_retry_after=1)
    wait_for(lambda: agent_status(agent.env)["connection"] == "maintenance", 10, what="maintenance")
    backend.admin.faults(maintenance_retry_after=None)
    command_id = backend.send_command(node["node_id"], "no.such.kind")
    backend.wait_command(command_id)
    outputs = []
    for args in (["ps", "--json"], ["ps"], ["status", "--json"], ["status"], ["config"], ["config", "--json"]):
        result = subprocess.run(
            [sys.executable, "-m", "faden_agent", *args], env=agent.env, capture_output=True, timeout=20
        )
        outputs.append(result.stdout + result.stderr)
    ps_table = json.loads(outputs[0])
    assert {w["name"] for w in ps_table["workers"]} >= {"stream", "executor"}
    system_ps = subprocess.run(["ps", "auxww"], capture_output=True, timeout=20).stdout
    texts = (
        outputs
        + [
            system_ps,
            agent.log_path.read_bytes(),
            backend.log_path.read_bytes(),
            (tmp_path / "agent0" / "state" / "status.json").read_bytes(),
        ]
        + _all_cmdlines_and_titles()
    )
    for secret in secrets:
        leaks = [text[:200] for text in texts if secret in text]
        assert not leaks, leaks
    assert b"<redacted>" in outputs[4]  # the token is set, and `config` shows that without its value


class ConnectProxy:
    """A minimal HTTPS proxy (HTTP CONNECT tunnels), recording each tunnel's target."""

    def __init__(self) -> None:
        self.targets: list[str] = []
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self.listener.getsockname()[1]}"
        threading.Thread(target=self.accept_loop, daemon=True).start()

    def accept_loop(self) -> None:
        while True:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            threading.Thread(target=self.tunnel, args=(client,), daemon=True).start()

    def tunnel(self, client) -> None:
        head = b""
        while b"\r\n\r\n" not in head:
            chunk = client.recv(4096)
            if not chunk:
                client.close()
                return
            head += chunk
        method, target = head.split(b" ")[:2]
        if method != b"CONNECT":
            client.sendall(b"HTTP/1.1 405 Method Not Allowed\r\nContent-Length: 0\r\n\r\n")
            client.close()
            return
        self.targets.append(target.decode())
        host, port = target.decode().rsplit(":", 1)
        upstream = socket.create_connection((host, int(port)))
        client.sendall(b"HTTP/1.1 200 Connection established\r\n\r\n")

        def pipe(src, dst) -> None:
            try:
                while data := src.recv(65536):
                    dst.sendall(data)
            except OSError:
                pass
            finally:
                for sock in (src, dst):
                    try:
                        sock.shutdown(socket.SHUT_RDWR)
                    except OSError:
                        pass

        threading.Thread(target=pipe, args=(upstream, client), daemon=True).start()
        pipe(client, upstream)

    def close(self) -> None:
        self.listener.close()


def test_https_proxy_is_used_for_the_backend(tmp_path):
    ca, cert, key = make_ca_and_server_cert(tmp_path)
    tls_backend = BackendProcess(tmp_path / "data", tmp_path / "backend.log", tls_cert=cert, tls_key=key, ca_bundle=ca)
    tls_backend.start()
    proxy = ConnectProxy()
    try:
        env = without_ca_overrides(agent_env_for(tls_backend, tmp_path, ca_bundle=ca))
        for name in ("NO_PROXY", "no_proxy", "HTTP_PROXY", "http_proxy"):
            env.pop(name, None)
        env["HTTPS_PROXY"] = proxy.url
        with AgentProcess(env, tmp_path / "agent.log"):
            tls_backend.wait_node(env["FADEN_NODE_AGENT_AGENT_ID"], heartbeats=2)
        assert f"127.0.0.1:{tls_backend.port}" in proxy.targets
    finally:
        proxy.close()
        tls_backend.stop()
