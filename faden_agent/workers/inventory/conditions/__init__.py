"""Node conditions: the machine around the GPUs (file systems, InfiniBand, links, clock, NVIDIA's
daemons, the kernel's lines), each a rule over what the inventory reads, held with its reason and
start time."""
