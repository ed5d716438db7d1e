"""One line of an exception, for a timeline message, a log line or a status field.

Every place that quotes an exception uses `error_line`, so they all cut the same way: the
first non-blank line, at most `limit` characters, the type's name when there is no text.
"""

from __future__ import annotations

ERROR_LINE_CHARS = 200


def error_line(exc: BaseException, limit: int = ERROR_LINE_CHARS, *, named: bool = False, root: bool = False) -> str:
    """named: 'TypeName: text' (a thread's failure in `ps`).
    root: the text of the innermost cause with any, without an '[Errno 111] ' prefix:
    requests and urllib3 wrap a refused connection three deep ('Max retries exceeded with
    url: ... (Caused by NewConnectionError(...))'); the operator needs 'Connection refused'."""
    source = _root(exc) if root else exc
    lines = str(source).strip().splitlines()
    text = lines[0].strip() if lines else ""
    if root:
        text = text.rsplit("] ", 1)[-1]
    if named:
        text = f"{type(exc).__name__}: {text}" if text else ""
    return (text or type(exc).__name__)[:limit]


def _root(exc: BaseException) -> BaseException:
    """The innermost exception of the chain (__cause__, else __context__) that has text."""
    found, seen = exc, {id(exc)}
    while (inner := exc.__cause__ or exc.__context__) is not None and id(inner) not in seen:
        seen.add(id(inner))
        exc = inner
        if str(exc).strip():
            found = exc
    return found
