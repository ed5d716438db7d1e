"""The stream worker: owns the backend link (docs/protocol.md).

worker.py runs the loop; enroll.py loads the membership or enrolls once; link.py is what the
threads share; downlink.py hands commands to the executor; heartbeat.py sends the node's
heartbeat; uplink.py (Uplink) drains the durable outbox to the backend.
"""
