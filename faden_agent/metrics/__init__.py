"""Prometheus' text formats, a bucket histogram and a small poll-turned HTTP server: the
parts of /metrics that know nothing of the supervisor (its endpoint: supervisor/metrics/)."""
