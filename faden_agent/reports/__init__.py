"""The report path: what a worker reports reaches the backend, durably.

    producer.py  Reports: what producers (executor, inventory, logs) use: a durable write
                 to the outbox, then a wake-up on Endpoints.reports_ready
    outbox.py    Outbox: the durable queue (one SQLite file in the state directory)
    sender.py    OutboxSender: the stream worker's thread that drains the outbox to the
                 backend in batches (BackendClient.post_reports: POST /api/agent/v1/uplink)

The node's heartbeat is not on this path: workers/stream/heartbeat.py sends it directly.
"""
