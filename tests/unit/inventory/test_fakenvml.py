"""The C-level NVML of the tests is as strict as a boundary should be: a state file it
cannot read exactly makes every call fail with NVML_ERROR_UNKNOWN and one line on stderr
naming the file and the fault, never a guess."""

from __future__ import annotations

import subprocess
import sys

import pytest

from tests.nvml.state import STATE_VARIABLE, build_library

CALL_INIT = """
import ctypes, sys
lib = ctypes.CDLL(sys.argv[1])
count = ctypes.c_uint()
print(lib.nvmlInitWithFlags(0), lib.nvmlDeviceGetCount_v2(ctypes.byref(count)), count.value)
"""


def init(tmp_path, text: str | None):
    library = build_library(tmp_path / "lib")
    state = tmp_path / "state.json"
    if text is not None:
        state.write_text(text)
    env = {STATE_VARIABLE: str(state), "PATH": "/usr/bin:/bin"}
    out = subprocess.run(
        [sys.executable, "-c", CALL_INIT, str(library)], env=env, capture_output=True, text=True, timeout=60
    )
    return out.stdout.split(), out.stderr.strip()


def test_a_good_state_is_read(tmp_path):
    assert init(tmp_path, '{"count": 3, "driver_version": "550.54.15", "x": -1}') == (["0", "0", "3"], "")


@pytest.mark.parametrize(
    "text, fault",
    [
        ('{"count": {"nested": 1}}', "expected an integer or a string"),
        ('{"count": 1.5}', "not an integer"),
        ('{"count": true}', "expected an integer or a string"),
        ('{"count": 1, "count": 2}', "duplicate key"),
        ('{"count": 1} {}', "trailing bytes after the object"),
        ('{"count": 99999999999999999999}', "integer out of range"),
        ('{"name": "a\\u0041"}', "unsupported escape"),
        ('{"count": 1', "expected , or }"),
    ],
)
def test_a_bad_state_fails_every_call_and_names_the_fault(tmp_path, text, fault):
    codes, stderr = init(tmp_path, text)
    assert codes[:2] == ["999", "999"]  # NVML_ERROR_UNKNOWN
    assert stderr.splitlines()[0] == f"fakenvml: {tmp_path / 'state.json'}: {fault}"


def test_no_state_file_is_one_line_not_a_crash(tmp_path):
    codes, stderr = init(tmp_path, None)
    assert (
        codes[:2] == ["999", "999"]
        and stderr == f"fakenvml: no state file ({STATE_VARIABLE}={tmp_path / 'state.json'})"
    )
