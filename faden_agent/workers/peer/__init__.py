"""The peer worker: serves images to peer machines of the cluster; the loop is in worker.py."""
