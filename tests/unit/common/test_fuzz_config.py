"""Property tests over configuration values: every input is a clean result or one clear line."""

from hypothesis import given, settings
from hypothesis import strategies as st

from faden_agent.config import VARIABLES, ConfigError, env_name, load_config

FIELDS = [v.field for v in VARIABLES if v.field not in ("enrollment_token_file", "ca_bundle", "journal_directory")]
values = st.one_of(
    st.text(max_size=40),
    st.sampled_from(
        ["-1", "0", "1e309", "nan", "true", "maybe", "http://", "https://h:99999", "ftp://x", "1.5", " 7 "]
    ),
)


@settings(max_examples=300, deadline=None)
@given(field=st.sampled_from(FIELDS), value=values)
def test_any_value_parses_or_fails_with_one_line_naming_the_variable(field, value):
    if "\x00" in value:
        return  # the environment cannot carry NUL
    name = env_name(field)
    try:
        load_config({name: value})
    except ConfigError as exc:
        message = str(exc)
        assert "\n" not in message
        assert name in message or "RECONNECT" in message or "BACKOFF" in message
        if field == "enrollment_token":
            assert value not in message or not value.strip()
