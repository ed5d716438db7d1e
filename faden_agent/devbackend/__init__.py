"""The reference backend: implements docs/protocol.md for tests, demos and trying the agent.

    faden-agent dev-backend --host 127.0.0.1 --port 8000 --data ./backend-data --admin-token T

server.py (HTTP: agent protocol, admin API, fault switches, downloads), store.py (SQLite),
admin.py (a small client of the admin API, used by `faden-agent admin` and the tests).
Nothing in the agent's runtime imports this package.
"""
