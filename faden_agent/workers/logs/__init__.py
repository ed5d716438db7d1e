"""The log shipper: journald, managed containers' logs and Ray Serve files to Loki (docs/logs.md)."""
