"""How a container or Ray log line begins: a worker's process prefix, a timestamp or level
prefix, and the level it names, as one of labels.LEVELS or "unknown".

Pure functions of the line; bounded work per line (anchored regexes, a JSON object parsed
only when the line is one). Nothing here raises on any input.
"""

from __future__ import annotations

import re
from typing import NamedTuple

import orjson

UNKNOWN = "unknown"
_WORD_LEVELS = {
    "trace": "debug",
    "debug": "debug",
    "info": "info",
    "notice": "notice",
    "warn": "warning",
    "warning": "warning",
    "err": "error",
    "error": "error",
    "crit": "crit",
    "critical": "crit",
    "fatal": "crit",
    "alert": "alert",
    "emerg": "emerg",
    "emergency": "emerg",
    "panic": "emerg",
}
_LETTER_LEVELS = {"T": "debug", "D": "debug", "I": "info", "W": "warning", "E": "error", "C": "crit", "F": "crit"}
_LEVEL_WORDS = "TRACE|DEBUG|INFO|NOTICE|WARNING|WARN|ERROR|ERR|CRITICAL|CRIT|FATAL|ALERT|EMERG|PANIC"
# Ray's forwarded worker output and vLLM's workers: "(ServeReplica:app:Model pid=412) ",
# "(pid=412) " or "(EngineCore_DP0 pid=77, ip=10.0.0.2) " before the line the process printed.
_PROCESS = re.compile(r"\((?:[^()\n]{1,100}? )?pid=\d{1,10}(?:, ip=[0-9a-fA-F.:]{1,45})?\) ")
# vLLM, Ray Serve, Python's basicConfig ("ERROR:root:..."), "[INFO] ...".
_LEVEL_FIRST = re.compile(rf"\[?({_LEVEL_WORDS})(?![A-Za-z])")
# Ray's C++ logs (raylet, GCS, core workers): "[2024-12-02 10:00:00,123 I 412 433] (raylet) ..."
_RAY_CPP = re.compile(r"\[\d{4}-\d\d-\d\d \d\d:\d\d:\d\d[,.]\d{1,9} ([TDIWECF]) \d+ \d+\]")
# glog / absl: "I1202 10:00:00.123456 412 file.cc:12] ..."
_GLOG = re.compile(r"([IWEF])\d{4} \d\d:\d\d:\d\d")
# A timestamp first (Ray's Python logs, most "%(asctime)s ..." formats); the level follows.
_TIME_FIRST = re.compile(r"\[?\d{4}-\d\d-\d\d[ T]\d\d:\d\d:\d\d(?:[,.]\d{1,9})?(?:Z|[+-]\d\d:?\d\d)?\]?")
# vLLM prefixes every line of a multi-line record with the same header (its NewLineFormatter):
# "ERROR 12-02 10:00:05 [core.py:586] " before each line of a traceback.
_VLLM_HEADER = re.compile(r"[A-Z]{4,8} \d\d-\d\d \d\d:\d\d:\d\d(?:\.\d{1,9})? \[[^\]\n]{1,120}\] ")
_LEVEL_NEAR = re.compile(rf"(?<![A-Za-z])({_LEVEL_WORDS})(?![A-Za-z])")
_LOGFMT_LEVEL = re.compile(r"(?:^|\s)(?:level|lvl|severity)=\"?([A-Za-z]{1,9})")
LEVEL_SEARCH_CHARS = 48  # how far past a leading timestamp the level may stand
JSON_LEVEL_KEYS = ("level", "levelname", "severity", "lvl")
MAX_JSON_CHARS = 64 * 1024
TRACEBACK_STARTS = (
    "Traceback (most recent call last):",
    "During handling of the above exception",
    "The above exception was the direct cause",
)


class Shape(NamedTuple):
    process: str  # the "(name pid=N) " prefix, "" when none
    prefixed: bool  # the line opens with a timestamp or a level: the head of an entry
    level: str  # one of labels.LEVELS, or UNKNOWN
    body: str  # the line after the process prefix
    header: str = ""  # a prefix that every line of one record repeats (vLLM's), "" when none


def level_word(word: str) -> str:
    return _WORD_LEVELS.get(word.lower(), UNKNOWN)


def _json_level(body: str) -> str | None:
    if len(body) > MAX_JSON_CHARS or not body.rstrip().endswith("}"):
        return None
    try:
        value = orjson.loads(body)
    except orjson.JSONDecodeError:
        return None
    if not isinstance(value, dict):
        return None
    for key in JSON_LEVEL_KEYS:
        if isinstance(value.get(key), str):
            return level_word(value[key])
    return UNKNOWN


def shape(line: str) -> Shape:
    """The shape of one line (its first 100 or so characters decide, JSON aside)."""
    process = ""
    match = _PROCESS.match(line)
    if match:
        process = match.group(0)
        body = line[match.end() :]
    else:
        body = line
    if not body:
        return Shape(process, False, UNKNOWN, body)
    first = body[0]
    if first == "{":
        level = _json_level(body)
        if level is not None:
            return Shape(process, True, level, body)
    if first.isupper() or first == "[":
        match = _LEVEL_FIRST.match(body)
        if match:
            header = _VLLM_HEADER.match(body)
            return Shape(process, True, level_word(match[1]), body, header.group(0) if header else "")
        match = _RAY_CPP.match(body)
        if match:
            return Shape(process, True, _LETTER_LEVELS[match[1]], body)
        match = _GLOG.match(body)
        if match:
            return Shape(process, True, _LETTER_LEVELS[match[1]], body)
    if first.isdigit() or first == "[":
        match = _TIME_FIRST.match(body)
        if match:
            near = _LEVEL_NEAR.search(body, match.end(), match.end() + LEVEL_SEARCH_CHARS)
            return Shape(process, True, level_word(near[1]) if near else _logfmt_level(body), body)
    if first.isalpha():
        level = _logfmt_level(body[:200])
        if level != UNKNOWN:
            return Shape(process, True, level, body)
    return Shape(process, False, UNKNOWN, body)


def _logfmt_level(text: str) -> str:
    match = _LOGFMT_LEVEL.search(text[:200])
    return level_word(match[1]) if match else UNKNOWN


def level_of(line: str) -> str:
    """The level a single line names (a Python traceback's first line: error)."""
    found = shape(line)
    if found.level == UNKNOWN and found.body.startswith(TRACEBACK_STARTS[0]):
        return "error"
    return found.level
