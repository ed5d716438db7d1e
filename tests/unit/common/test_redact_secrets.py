"""Text someone else wrote (a container's stderr) made safe to pass on (common/redact.py):
every secret known by its form or its name replaced, terminal escapes and control characters
dropped, ordinary words that merely name a secret left alone."""

from __future__ import annotations

from faden_agent.common.redact import REDACTED, redact_secrets, terminal_safe

SECRETS = {
    "aws key id": "AKIAIOSFODNN7EXAMPLE",
    "aws session key id": "ASIAY34FZKBOKMUTVV7A",
    "hugging face": "hf_" + "AbCdEfGhIjKlMnOpQrStUvWxYz12345678",
    "github": "ghp_" + "a1" * 18,
    "gitlab": "glpat-" + "x1y2z3" * 4,
    "openai": "sk-proj-" + "Q" * 40,
    "slack": "xoxb-1234567890-abcdefghij",
    "google": "AIza" + "S" * 35,
    "jwt": "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.dozjgNryP4J3jVmNHl0w5N_XgL0n3I9PlFUP0THsR8U",
}


def test_secrets_by_their_form_are_replaced_whole():
    for name, secret in SECRETS.items():
        line = f"using {secret} now"
        assert redact_secrets(line) == f"using {REDACTED} now", name


def test_secrets_by_their_name_keep_the_name():
    cases = {
        "AWS_SECRET_ACCESS_KEY=wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY x": f"AWS_SECRET_ACCESS_KEY={REDACTED} x",
        'db_password: "hunter2 with spaces"': f"db_password: {REDACTED}",
        "HF_TOKEN='abc' ok": f"HF_TOKEN={REDACTED} ok",
        "Authorization: Bearer abcdefghijklmnop.qrs": f"Authorization: {REDACTED}",
        "curl -H 'authorization=token 12345678901234567890'": f"curl -H 'authorization={REDACTED}",
        "clone https://alice:s3cr3t@git.example/x.git": f"clone https://{REDACTED}@git.example/x.git",
        "-----BEGIN RSA PRIVATE KEY-----\nMIIEow\n-----END RSA PRIVATE KEY----- done": f"{REDACTED} done",
    }
    for raw, expected in cases.items():
        assert redact_secrets(raw) == expected, raw
    for plain in ("the token count is 5", "password reset link sent", "secret sauce", "hf_short is no token"):
        assert redact_secrets(plain) == plain


def test_terminal_escapes_and_control_characters_are_dropped():
    assert terminal_safe("\x1b[1;31mred\x1b[0m \x1b]8;;http://x\x1b\\link\x1b]8;;\x1b\\ \x1bc") == "red link "
    assert terminal_safe("a\x00b\x07c\x7fd\x85e\u202ef\u2066g\rh\ti") == "abcdefgh\ti"
    assert terminal_safe("plain ünïcode ✓") == "plain ünïcode ✓"
