"""The inventory's GPU work: the NVML probe (probe.py), each GPU's health and verdict
(health.py, rules.py), Xids from NVML's events and the kernel's lines (events.py,
kernel_xids.py, xids.py), the evidence kept across restarts (evidence.py)."""
