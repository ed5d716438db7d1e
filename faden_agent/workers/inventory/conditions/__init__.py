"""Node conditions: the machine around the GPUs (file systems, InfiniBand, links, clock, NVIDIA's
daemons), each a rule over what the inventory reads, held with its reason and start time."""
