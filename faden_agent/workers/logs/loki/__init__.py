"""Loki as the log worker's target: where pushes go (destinations.py), the JSON and protobuf
bodies and the delivery policy (client.py, proto.py), one keep-alive connection (keepalive.py)."""
