"""The agent's own D-Bus client (ipc/dbusconn.py) against jeepney, for the logind inhibitor.

A private dbus-daemon with the tests' stand-in logind (tests/support/systembus.py); each figure
in fresh interpreters: the import's wall time (median of --runs), the PSS a process adds
by importing, connecting and holding the inhibitor (over one that imported neither), and the
round trip from nothing to holding it (connect, AUTH, Hello, AddMatch, Get, Inhibit).
Run: python3 bench/dbus_client_bench.py [--runs 25] [--json PATH]   (needs jeepney installed)
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.output import emit
from tests.support.systembus import PrivateSystemBus, StandInLogind

PRELUDE = """
import sys, time, os, socket, struct, array, logging
sys.path.insert(0, {root!r})
import faden_agent.ipc  # the supervisor has these loaded anyway (zmq, orjson, the envelope)
def pss_kib():
    with open("/proc/self/smaps_rollup") as fh:
        return next(int(l.split()[1]) for l in fh if l.startswith("Pss:"))
"""
OURS_IMPORT = "from faden_agent.ipc.dbusconn import Bus"
OURS_HOLD = """
bus = Bus(address, 1.0)
dbus = ("org.freedesktop.DBus", "/org/freedesktop/DBus", "org.freedesktop.DBus")
login1, path, manager = "org.freedesktop.login1", "/org/freedesktop/login1", "org.freedesktop.login1.Manager"
bus.add_match(f"type='signal',sender='{dbus[0]}',member='NameOwnerChanged',arg0='{login1}'")
bus.add_match(f"type='signal',sender='{login1}',interface='{manager}',member='PrepareForShutdown'")
bus.call(*dbus, "GetNameOwner", "s", [login1])
bus.call(login1, path, "org.freedesktop.DBus.Properties", "Get", "ss", [manager, "InhibitDelayMaxUSec"])
why = ["shutdown", "faden-agent", "why", "delay"]
fd = bus.call(login1, path, manager, "Inhibit", "ssss", why, want_fds=True).fds[0]
"""
JEEPNEY_IMPORT = """
from jeepney import DBusAddress, MatchRule, Properties, new_method_call
from jeepney.bus_messages import message_bus
from jeepney.io.blocking import DBusConnection, prep_socket
"""
JEEPNEY_HOLD = """
conn = DBusConnection(prep_socket(address.split("=", 1)[1], enable_fds=True, timeout=1.0), enable_fds=True)
login1 = DBusAddress("/org/freedesktop/login1", "org.freedesktop.login1", "org.freedesktop.login1.Manager")
owner = MatchRule(type="signal", sender="org.freedesktop.DBus", member="NameOwnerChanged")
owner.add_arg_condition(0, "org.freedesktop.login1")
shutdown = MatchRule(type="signal", sender=login1.bus_name, interface=login1.interface, member="PrepareForShutdown")
conn.send_and_get_reply(message_bus.AddMatch(owner), timeout=1.0)
conn.send_and_get_reply(message_bus.AddMatch(shutdown), timeout=1.0)
conn.send_and_get_reply(message_bus.GetNameOwner("org.freedesktop.login1"), timeout=1.0)
conn.send_and_get_reply(Properties(login1).get("InhibitDelayMaxUSec"), timeout=1.0)
why = ("shutdown", "faden-agent", "why", "delay")
fd = conn.send_and_get_reply(new_method_call(login1, "Inhibit", "ssss", why), timeout=1.0).body[0].to_raw_fd()
"""
CLIENTS = {"ours": (OURS_IMPORT, OURS_HOLD), "jeepney": (JEEPNEY_IMPORT, JEEPNEY_HOLD)}


def run(code: str, pycache: str) -> dict:
    """In a fresh interpreter whose modules come from bytecode caches (as installed), not source."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    env["PYTHONPYCACHEPREFIX"] = pycache
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, env=env)
    if done.returncode:
        raise RuntimeError(done.stderr[-2000:])
    return json.loads(done.stdout.strip().splitlines()[-1])


def measure(client: str, address: str, root: str, pycache: str) -> dict:
    imports, hold = CLIENTS[client]
    indented = "\n".join("    " + line for line in hold.strip().splitlines())
    code = (
        PRELUDE.format(root=root)
        + f"""
address = {address!r}
base = pss_kib()
t0 = time.perf_counter()
{imports.strip()}
imported_s = time.perf_counter() - t0
imported_kib = pss_kib() - base
t0 = time.perf_counter()
if True:
{indented}
held_s = time.perf_counter() - t0
import json
figures = {{"import_s": imported_s, "hold_s": held_s, "import_pss_kib": imported_kib}}
print(json.dumps({{**figures, "pss_added_kib": pss_kib() - base}}))
"""
    )
    return run(code, pycache)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=25)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    root = str(Path(__file__).resolve().parents[1])
    with tempfile.TemporaryDirectory() as tmp:
        bus = PrivateSystemBus(Path(tmp) / "bus").start()
        logind = StandInLogind(bus.address)
        logind.start()
        try:
            for client in CLIENTS:
                measure(client, bus.address, root, tmp)  # writes the bytecode caches
            samples: dict[str, list[dict]] = {client: [] for client in CLIENTS}
            for _ in range(args.runs):  # interleaved: a busy moment costs both alike
                for client in CLIENTS:
                    samples[client].append(measure(client, bus.address, root, tmp))
            figures = {
                client: {
                    "import_ms": round(statistics.median(s["import_s"] for s in runs) * 1000, 2),
                    "hold_ms": round(statistics.median(s["hold_s"] for s in runs) * 1000, 2),
                    "import_pss_kib": statistics.median(s["import_pss_kib"] for s in runs),
                    "pss_added_kib": statistics.median(s["pss_added_kib"] for s in runs),
                }
                for client, runs in samples.items()
            }
        finally:
            logind.stop()
            bus.stop()
    emit({"runs": args.runs, **figures}, args.json)


if __name__ == "__main__":
    main()
