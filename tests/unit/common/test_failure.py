"""The four errors that end in a reported reason share one base, Failure(reason, message):
one `except Failure` reads the same two fields from any of them."""

from __future__ import annotations

import pytest

from faden_agent.common.failure import Failure
from faden_agent.transfers.fetch import PeerFailure
from faden_agent.transfers.probe_client import ProbeFailed
from faden_agent.transfers.tickets import TicketRefused
from faden_agent.workers.executor.docker_ops import CommandFailed


@pytest.mark.parametrize("kind", [PeerFailure, ProbeFailed, TicketRefused, CommandFailed])
def test_each_is_a_failure_with_reason_and_message(kind):
    with pytest.raises(Failure) as caught:
        raise kind("timeout", "the peer did not answer within 5 s")
    assert (caught.value.reason, caught.value.message) == ("timeout", "the peer did not answer within 5 s")
    assert str(caught.value) == "the peer did not answer within 5 s"


def test_command_failed_keeps_its_result_fields():
    failure = CommandFailed("container_exited", "exited with code 3", exit_code=3)
    assert failure.result == {"exit_code": 3} and failure.reason == "container_exited"
