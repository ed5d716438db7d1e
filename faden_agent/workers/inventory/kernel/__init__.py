"""The kernel's log lines as one source for the inventory's consumers (the GPU's Xid lines, the
node's conditions): the host's journal (journald) first, /dev/kmsg where there is none
(lines.py, journald.py, kmsg.py)."""
