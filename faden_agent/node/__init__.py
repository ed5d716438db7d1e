"""This machine's identity and place: membership, cluster, fingerprint, link status."""
