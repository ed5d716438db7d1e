"""Every command kind, one module per family: kind `family.verb` lives in `family.py`
(container.run in container.py, image.fetch in image.py), which holds its handlers and
registers its CommandKinds (kinds.py). A new family is a new module here, imported below.
"""

from faden_agent.workers.executor.commands import command, container, gpu, image, node, traffic  # noqa: F401 - each registers its kinds
from faden_agent.workers.executor.commands.frame import Commands
from faden_agent.workers.executor.kinds import KINDS

COMMAND_KINDS = tuple(KINDS)  # every kind a family module registered, in their order

__all__ = ["COMMAND_KINDS", "KINDS", "Commands"]
