"""The agent as a systemd service: the unit, its environment file, systemctl.

`faden-agent start|stop|restart|uninstall` call `manager`; root gets a system service,
anyone else a user service (`systemctl --user`). Import the modules themselves: the stream
worker reads the environment file (envfile.py) without loading the rest.
"""
