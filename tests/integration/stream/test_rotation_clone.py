"""Rotation a clone cannot win: a copy of the machine's credential that polls the
stream through a rotation, reading and confirming the new credential at once, never ends up
holding the node; the real machine says `credential_rejected` with what to do."""

from __future__ import annotations

import threading
from pathlib import Path

import orjson
import requests

from faden_agent import protocol
from faden_agent.cli.status import collect_status
from faden_agent.config import load_config
from faden_agent.node.membership import load_membership
from tests.support.agentproc import wait_for
from tests.support.backendproc import accepted, agent_on_backend, backend  # noqa: F401


class PollingClone:
    """The stream asked again and again with what the copied disk holds; a credential read
    is confirmed at once (an uplink with it) and used from then on."""

    def __init__(self, url: str, credential: str):
        self.url, self.credential = url, credential
        self.statuses: list[int] = []
        self.confirmed: list[int] = []
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._poll, daemon=True)
        self.thread.start()

    def _poll(self) -> None:
        while not self.stop.is_set():
            headers = {"Authorization": f"Bearer {self.credential}"}
            try:
                with requests.get(
                    self.url + protocol.STREAM_PATH, headers=headers, stream=True, timeout=(2, 1)
                ) as answer:
                    self.statuses.append(answer.status_code)
                    if answer.status_code != 200:
                        self.stop.wait(0.05)
                        continue
                    for line in answer.iter_lines():
                        message = orjson.loads(line)
                        if message.get("type") == "credential":
                            self.credential = message["credential"]
                            self.confirmed.append(accepted_with(self.url, self.credential))
                            break
            except requests.RequestException:
                self.stop.wait(0.05)

    def close(self) -> None:
        self.stop.set()
        self.thread.join(10)


def accepted_with(url: str, credential: str) -> int:
    return requests.post(
        url + protocol.UPLINK_PATH,
        json={"records": []},
        headers={"Authorization": f"Bearer {credential}"},
        timeout=10,
    ).status_code


def test_a_clone_polling_through_a_rotation_never_holds_the_machine(backend, agent_on_backend):
    agent, node = agent_on_backend()
    config = load_config(agent.env)
    old = load_membership(Path(agent.env["FADEN_NODE_AGENT_STATE_PATH"])).credential
    clone = PollingClone(backend.url, old)
    try:
        wait_for(lambda: 200 in clone.statuses, 15, what="the clone's stream")
        backend.admin.rotate_credential(node["node_id"])
        wait_for(lambda: backend.admin.node(node["node_id"])["shared_identity"], 30, what="the identity contested")
        status = wait_for(
            lambda: (s := collect_status(config))["connection"] == "credential_rejected" and s,
            30,
            what="the real machine's status",
        )
    finally:
        clone.close()
    print(f"clone: statuses {sorted(set(clone.statuses))}, confirmations {clone.confirmed}")
    assert accepted(backend, clone.credential) == 401 and accepted(backend, old) == 401  # the clone holds nothing
    mine = load_membership(Path(agent.env["FADEN_NODE_AGENT_STATE_PATH"])).credential
    assert accepted(backend, mine) == 401  # nor the machine: nobody can tell which one is real
    assert "shared_identity" in status["last_error"] and "enroll" in status["last_error"], status
