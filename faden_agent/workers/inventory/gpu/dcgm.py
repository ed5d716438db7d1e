"""DCGM's diagnostic (`dcgmi diag -r LEVEL -i IDS -j`) read into per-GPU test results: its JSON
in both forms dcgmi prints (4.x: results by entity, 3.x: by `gpu_id`; docs/inventory.md, "Checks"),
or the runtime error it printed instead. A result a busy GPU explains (DCGM could not get the
GPU's memory or a context, fell short of a load target, found other clients) is `busy`, never
a fault; DCGM's own "resource is in use" (another diagnostic runs) is `inconclusive`.
"""

from __future__ import annotations

from typing import Any

import orjson

ROOTS = ("DCGM Diagnostic", "DCGM GPU Diagnostic")  # 4.x, 3.x
# DCGM's error ids (dcgm_errors.h) that work beside the test explains: graphics processes (25),
# stress or power or bandwidth short of the target (30, 50, 62, 63), memory it could not allocate
# (56), a CUDA context it could not create (66)
BUSY_ERRORS = frozenset({25, 30, 50, 56, 62, 63, 66})
IN_USE = "resource is in use"  # DCGM_ST_IN_USE's words: another diagnostic holds the GPUs
MAX_TESTS = 64
MAX_TEXT = 300
PASS, WARN, FAIL, SKIP = "pass", "warn", "fail", "skip"
STATUSES = {"pass": PASS, "warn": WARN, "fail": FAIL, "skip": SKIP}


def command(dcgmi: str, level: int, indices: list[int]) -> list[str]:
    return [dcgmi, "diag", "-r", str(level), "-i", ",".join(str(i) for i in indices), "-j"]


class Report:
    __slots__ = ("tests", "general", "runtime_error", "version")

    def __init__(
        self,
        tests: dict[int, list[dict[str, Any]]] | None = None,
        general: list[dict[str, Any]] | None = None,
        runtime_error: str | None = None,
        version: str | None = None,
    ) -> None:
        self.tests: dict[int, list[dict[str, Any]]] = {} if tests is None else tests  # GPU index -> its tests
        self.general: list[dict[str, Any]] = [] if general is None else general  # results not tied to one GPU
        self.runtime_error = runtime_error
        self.version = version


class Unreadable(ValueError):
    """dcgmi printed nothing this module can read: the message says what."""


def parse(text: str) -> Report:
    """The report in dcgmi's JSON; Unreadable naming the first thing that is not its form."""
    start = text.find("{")
    if start < 0:
        raise Unreadable("no JSON object in its output")
    try:
        data = orjson.loads(text[start : text.rfind("}") + 1])
    except orjson.JSONDecodeError as exc:
        raise Unreadable(f"its JSON does not parse: {str(exc)[:120]}") from None
    if not isinstance(data, dict):
        raise Unreadable("its JSON is not an object")
    root = next((data[name] for name in ROOTS if isinstance(data.get(name), dict)), None)
    if root is None:
        raise Unreadable(f"none of {', '.join(ROOTS)} in its JSON")
    report = Report(version=_text((data.get("metadata") or {}).get("version") or root.get("version")))
    if root.get("runtime_error"):
        report.runtime_error = _text(root["runtime_error"])
        return report
    categories = root.get("test_categories")
    if not isinstance(categories, list):
        raise Unreadable("test_categories is not a list")
    for category in categories[:MAX_TESTS]:
        for test in (category or {}).get("tests") or []:
            if isinstance(test, dict):
                _add_test(report, _text(category.get("category")), test)
    return report


def _add_test(report: Report, category: str | None, test: dict[str, Any]) -> None:
    name = _text(test.get("name")) or "unnamed"
    for result in (test.get("results") or [])[:MAX_TESTS]:
        if not isinstance(result, dict):
            continue
        entry = {"name": name, "category": category, **_outcome(result)}
        index = _gpu_of(result)
        if index is None:
            report.general.append(entry)
        elif len(report.tests.setdefault(index, [])) < MAX_TESTS:
            report.tests[index].append(entry)


def _outcome(result: dict[str, Any]) -> dict[str, Any]:
    status = str(result.get("status") or "").split(" ", 1)[0].lower()
    warnings = [w for w in result.get("warnings") or [] if isinstance(w, dict)]
    ids = sorted({w["error_id"] for w in warnings if type(w.get("error_id")) is int})
    words = [_text(w.get("warning")) for w in warnings if w.get("warning")]
    info = result.get("info")
    if isinstance(info, list):
        info = "; ".join(str(i) for i in info[:4])
    detail = "; ".join(w for w in words if w) or _text(info) or ""
    return {"result": STATUSES.get(status, FAIL if status else SKIP), "detail": detail[:MAX_TEXT], "error_ids": ids}


def _gpu_of(result: dict[str, Any]) -> int | None:
    """The GPU a result is of: 4.x's entity (group GPU), 3.x's gpu_id; None when none."""
    if "entity_id" in result:
        group = result.get("entity_group")
        if group not in (None, "GPU") and result.get("entity_group_id") != 1:
            return None
        return _int(result.get("entity_id"))
    return _int(result.get("gpu_id", result.get("gpu_ids")))


def busy_explains(test: dict[str, Any]) -> bool:
    """A failed or warned test whose every DCGM error is one work on the GPU causes."""
    return test["result"] in (FAIL, WARN) and bool(test["error_ids"]) and set(test["error_ids"]) <= BUSY_ERRORS


def _int(value: Any) -> int | None:
    if type(value) is int and 0 <= value < 4096:
        return value
    if isinstance(value, str) and value.strip().isdigit() and len(value.strip()) < 5:
        return int(value.strip())
    return None


def _text(value: Any) -> str | None:
    if value is None:
        return None
    text = " ".join(str(value).split())
    return text if len(text) <= MAX_TEXT else text[: MAX_TEXT - 3] + "..."
