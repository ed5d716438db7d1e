"""The agent as a systemd service: the unit, its environment file, systemctl.

`faden-agent start|stop|restart|uninstall` call `manager`; root gets a system service,
anyone else a user service (`systemctl --user`).
"""

from faden_agent.service.manager import ServiceError, install_and_start, restart, service_state, stop, uninstall
from faden_agent.service.paths import ServicePaths

__all__ = ["ServiceError", "ServicePaths", "install_and_start", "restart", "service_state", "stop", "uninstall"]
