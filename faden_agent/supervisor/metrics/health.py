"""/readyz's rule: the four core workers RUNNING and the backend link connected (or only
waiting out the backend's Retry-After); otherwise one line saying why not."""

from __future__ import annotations

from typing import Any

from faden_agent.protocol.link import READY_LINK_STATES

CORE_WORKERS = ("stream", "executor", "inventory", "logs")


def readiness(table: dict[str, Any]) -> tuple[bool, str]:
    rows = {w.get("name"): w for w in table.get("workers", []) if isinstance(w, dict)}
    states = {name: (rows.get(name) or {}).get("state", "absent") for name in CORE_WORKERS}
    down = [f"{name} {state}" for name, state in states.items() if state != "RUNNING"]
    if down:
        return False, "not ready: worker " + ", ".join(down)
    status = rows["stream"].get("status")
    link = (status or {}).get("link") if isinstance(status, dict) else None
    state = link.get("state") if isinstance(link, dict) else None
    if state in READY_LINK_STATES:
        return True, f"ready: workers running, link {state}"
    error = str(link.get("last_error") or "") if isinstance(link, dict) else ""
    because = f": {error}"[:300].replace("\n", " ") if error else ""
    return False, f"not ready: link {state or 'unknown'}{because}"
