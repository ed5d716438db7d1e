"""Every command kind, one module per family: kind `family.verb` lives in `family.py`
(container.run in container.py, image.fetch in image.py), which holds its handlers and
registers its CommandKinds (kinds.py). A new family is a new module here, imported below.
"""

from faden_agent import protocol
from faden_agent.workers.executor.commands import command, container, image, node, traffic  # noqa: F401 - each registers its kinds
from faden_agent.workers.executor.commands.frame import Commands
from faden_agent.workers.executor.kinds import KINDS

assert set(KINDS) == set(protocol.COMMAND_KINDS), "protocol.COMMAND_KINDS and the registered kinds disagree"

__all__ = ["KINDS", "Commands"]
