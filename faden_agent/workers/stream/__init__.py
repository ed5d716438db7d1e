"""The stream worker: owns the backend link (docs/protocol.md).

worker.py     the loop: starts the threads below, wakes the uplink
enroll.py     Enrollment: load the membership (state) file, or enroll once
link.py       what the threads share: the membership, the connection status, backoff, the gate
downlink.py   the NDJSON stream -> commands handed to the executor
heartbeat.py  the node's heartbeat to the backend, with the worker table
uplink.py     Uplink: the durable outbox -> the backend, in batches
"""
