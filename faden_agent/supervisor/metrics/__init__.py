"""The supervisor's Prometheus endpoint: /metrics, /healthz, /readyz (docs/service.md)."""
