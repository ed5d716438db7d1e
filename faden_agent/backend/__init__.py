"""The agent's side of the backend: its HTTP client (client.py), the durable outbox of
reports (outbox.py) and the producers' door to it (producer.py)."""
