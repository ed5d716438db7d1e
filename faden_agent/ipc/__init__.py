"""ZeroMQ plumbing shared by the supervisor and every worker.

- endpoints: the runtime directory (mode 0700) and the name of each ipc:// socket;
- envelope: the small versioned orjson message format;
- sockets: one place that makes sockets (linger, HWM) and does request/reply with timeouts.
"""

from faden_agent.ipc.endpoints import Endpoints, ensure_runtime_dir
from faden_agent.ipc.envelope import ENVELOPE_VERSION, EnvelopeError, Message, decode, encode
from faden_agent.ipc.sockets import Channel, Requester, request, send_last_word

__all__ = [
    "ENVELOPE_VERSION",
    "Channel",
    "Endpoints",
    "EnvelopeError",
    "Message",
    "Requester",
    "decode",
    "encode",
    "ensure_runtime_dir",
    "request",
    "send_last_word",
]
