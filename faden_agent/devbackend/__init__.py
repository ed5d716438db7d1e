"""The reference backend: implements docs/protocol.md for tests, demos and trying the agent.

    faden-agent dev-backend --host 127.0.0.1 --port 8000 --data ./backend-data --admin-token T

server.py (the HTTP server: joins the route tables of api_agent.py, api_relay.py,
api_admin.py, faults.py and downloads.py; loki_relay.py passes log pushes on to Loki; web.py
is the request plumbing; app.py the shared state), store.py (SQLite), admin.py (a small
client of the admin API, used by `faden-agent admin` and the tests). Paths: protocol.py.
Nothing in the agent's runtime imports this package.
"""
