"""Hypothesis strategies for what comes off the wire, shared by the property tests: any JSON value
as orjson reads it, header text, Retry-After values; and the credential they send, which must
never show up in an error message."""

from __future__ import annotations

from hypothesis import strategies as st

FUZZ_CREDENTIAL = "fuzz-credential"  # must never show up in an error message

json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(2**63), 2**64 - 1)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=12),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3),
    max_leaves=10,
)
# Header values a server can put on the wire (latin-1, no line breaks), plus the nasty classics.
header_text = st.text(st.characters(min_codepoint=0x20, max_codepoint=0xFF, blacklist_characters="\x7f"), max_size=40)
retry_afters = (
    st.none()
    | header_text
    | st.sampled_from(
        [
            "30",
            "-5",
            "0",
            "1e400",
            "inf",
            "-inf",
            "nan",
            "99999999999999",
            "1_000",
            " 7 ",
            "0x10",
            "Sun, 06 Nov 1994 08:49:37 GMT",
            "Fri, 31 Dec 9999 23:59:59 GMT",
            "Mon, 32 Jan 2020 00:00:00 GMT",
            "Thu, 01 Jan 1970 00:00:00 +9999",
            "Sunday, 06-Nov-94 08:49:37 GMT",
            "tomorrow",
        ]
    )
)
