"""The inventory worker: what this machine is and has (docs/inventory.md).

worker.py runs the loop; collector.py and probes.py run the probes (host, disks, network,
Docker, GPU and its health: gpu/health.py, gpu/rules.py), each bounded; record.py builds
full / unchanged records; traffic/ samples traffic to the cluster's peers.
"""
