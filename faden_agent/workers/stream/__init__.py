"""The stream worker: owns the backend link (docs/protocol.md).

worker.py         the loop: starts the threads below, passes pokes on
enroll.py         membership: load the state file, or enroll once
link.py           what the threads share: the link's status, backoff, the gate
downlink.py       the NDJSON stream -> commands handed to the executor
uplink_sender.py  the durable outbox -> the backend, in batches
heartbeat.py      the node's heartbeat to the backend, with the worker table
"""
