"""Evidence at a stall: when a serving container stalls or dies of a hardware cause, its
Python stacks (stacks.py, pyspy.py), GPU state (gpus.py) and last log lines, cut to the byte
cap (document.py), taken once by a thread of its own (capturer.py) and left for the log worker.
Imported at the first capture only: an idle inventory carries none of it."""
