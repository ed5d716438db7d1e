"""nvidia-smi for a reset: the commands (`-pm 0|1 -i BUS`, `--gpu-reset -i BUS`) and what its
answer means, from its words and exit codes as NVIDIA's manual and its users show them
(docs/inventory.md, "Resets"). A cause is a short name; the tool's own words go beside it.
"""

from __future__ import annotations

from faden_agent.common.programs import Ran

IN_USE = "in_use"  # "In use by another client" / "is currently in use by another process"
PRIMARY = "primary_gpu"  # "GPU Reset couldn't run because GPU ... is the primary GPU"
NOT_SUPPORTED = "not_supported"  # exit 3: not available on this device
NO_PERMISSION = "no_permission"  # exit 4
LOST = "gpu_lost"  # exit 15: fallen off the bus
HUNG = "hung"  # it did not end within its bound: ended by the agent
FAILED = "failed"  # any other non-zero exit
EXIT_CAUSES = {3: NOT_SUPPORTED, 4: NO_PERMISSION, 15: LOST}
RESET_DONE = "was successfully reset"


def reset_command(nvidia_smi: str, bus_id: str) -> list[str]:
    return [nvidia_smi, "--gpu-reset", "-i", bus_id]


def persistence_command(nvidia_smi: str, bus_id: str, on: bool) -> list[str]:
    return [nvidia_smi, "-pm", "1" if on else "0", "-i", bus_id]


def reset_cause(ran: Ran) -> str | None:
    """None when the reset was done; else why not (one of the causes above)."""
    if ran.ended:
        return HUNG
    if ran.error:
        return FAILED
    text = ran.output.lower()
    if ran.exit_code == 0 and RESET_DONE in text:
        return None
    if "in use by another" in text or "currently being used by one or more other processes" in text:
        return IN_USE
    if "is the primary gpu" in text:
        return PRIMARY
    return EXIT_CAUSES.get(ran.exit_code or 0, FAILED)


def said(ran: Ran) -> str:
    """The tool's words, or what happened instead of them."""
    if ran.error:
        return ran.error
    if ran.ended == "time_limit":
        return f"{ran.argv[0]} did not end within {ran.elapsed_s:.0f} s: ended (its process group)"
    if ran.ended:
        return f"{ran.argv[0]} was ended: the command stopped"
    words = ran.words() or "(no output)"
    return f"{words} (exit {ran.exit_code})"
