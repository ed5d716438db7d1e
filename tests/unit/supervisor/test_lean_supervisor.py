"""What the supervisor imports before it forks is in every worker: `faden-agent
run` loads no command-line library, and requests loads without a charset guesser."""

from __future__ import annotations

import json
import os
import subprocess
import sys

CLI_LIBRARIES = ("typer", "click", "rich")


def imported_modules(importtime_stderr: str) -> set[str]:
    """Module names from `python -X importtime` output on stderr."""
    names = set()
    for line in importtime_stderr.splitlines():
        if line.startswith("import time:") and "|" in line:
            names.add(line.rsplit("|", 1)[1].strip())
    return names


def test_run_loads_no_cli_library_and_names_a_bad_setting_in_one_line(tmp_path):
    env = dict(os.environ, FADEN_NODE_AGENT_HEARTBEAT_INTERVAL_SEC="soon", FADEN_NODE_AGENT_STATE_DIR=str(tmp_path))
    out = subprocess.run(
        [sys.executable, "-X", "importtime", "-m", "faden_agent", "run"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 2
    lines = [line for line in out.stderr.splitlines() if not line.startswith("import time:")]
    assert len(lines) == 1 and "FADEN_NODE_AGENT_HEARTBEAT_INTERVAL_SEC" in lines[0], lines
    modules = imported_modules(out.stderr)
    assert "faden_agent.config" in modules  # the parse did happen
    loaded = {m for m in modules if m.split(".")[0] in CLI_LIBRARIES}
    assert not loaded, loaded


def test_other_commands_still_go_through_the_cli():
    out = subprocess.run(
        [sys.executable, "-m", "faden_agent", "run", "--help"], capture_output=True, text=True, timeout=60
    )
    assert out.returncode == 0 and "supervisor and its workers" in out.stdout


CHILD = """
import sys, warnings
warnings.simplefilter("error")  # requests' "no character detection" warning would raise here
from faden_agent.supervisor.prefork.preload import skip_charset_guessers
skip_charset_guessers()
import requests
response = requests.models.Response()
response._content = "grüße".encode()
response.encoding = None  # a body that names no charset: requests would guess
print(response.text, "charset_normalizer" in sys.modules and sys.modules["charset_normalizer"] is not None)
"""


def test_requests_loads_without_a_charset_guesser_and_reads_utf8():
    out = subprocess.run([sys.executable, "-c", CHILD], capture_output=True, text=True, check=True, timeout=60)
    assert out.stdout.split() == ["grüße", "False"], out.stdout + out.stderr


HTTP2_CHILD = """
import json, sys, threading
from http.server import BaseHTTPRequestHandler, HTTPServer
from faden_agent.supervisor.prefork.preload import skip_charset_guessers
skip_charset_guessers()
import docker, requests, urllib3.connection
class Answer(BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(200); self.send_header("Content-Length", "2"); self.end_headers(); self.wfile.write(b"ok")
    def log_message(self, *args):
        pass
server = HTTPServer(("127.0.0.1", 0), Answer)
threading.Thread(target=server.serve_forever, daemon=True).start()
reply = requests.get(f"http://127.0.0.1:{server.server_port}/", timeout=10)
print(json.dumps({"metadata": "importlib.metadata" in sys.modules, "text": reply.text,
                  "probe": callable(urllib3.connection.http2_probe.acquire_and_get)}))
"""


def test_urllib3_loads_without_importlib_metadata_and_still_works():
    out = subprocess.run([sys.executable, "-c", HTTP2_CHILD], capture_output=True, text=True, check=True, timeout=60)
    assert json.loads(out.stdout.splitlines()[-1]) == {"metadata": False, "text": "ok", "probe": True}, out.stderr
