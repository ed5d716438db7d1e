"""The report path: what a worker reports reaches the backend, durably.

    producer.py  Reports: what producers (executor, inventory, logs) use: a durable write
                 to the outbox, then a wake-up on Endpoints.reports_ready
    outbox.py    Outbox: the durable queue (one SQLite file in the state directory)

The stream worker's Uplink (workers/stream/uplink.py) drains the outbox to the backend.
"""
