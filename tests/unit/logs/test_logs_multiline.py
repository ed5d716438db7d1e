"""Line shapes, levels and multiline joining of container and Ray lines, on the formats vLLM,
Ray (Python and C++), glog, Python logging and JSON loggers really print."""

from __future__ import annotations

import pytest

from faden_agent.workers.logs.labels import LEVELS
from faden_agent.workers.logs.multiline import CONTINUED, Joiner
from faden_agent.workers.logs.shapes import UNKNOWN, level_of, shape

# A Python traceback as an uncaught exception prints it (chained, with the blank lines).
TRACEBACK = [
    "Traceback (most recent call last):",
    '  File "/app/serve.py", line 12, in load',
    "    raise ValueError('bad shard')",
    "ValueError: bad shard",
    "",
    "During handling of the above exception, another exception occurred:",
    "",
    "Traceback (most recent call last):",
    '  File "/app/serve.py", line 20, in <module>',
    "    load()",
    "RuntimeError: model failed to load",
]


@pytest.mark.parametrize(
    ("line", "level"),
    [
        ("INFO 12-02 10:00:00 [api_server.py:1024] vLLM API server version 0.9.1", "info"),
        ("WARNING 12-02 10:00:01 [config.py:3434] Casting torch.bfloat16 to torch.float16.", "warning"),
        ("(EngineCore_0 pid=412) ERROR 12-02 10:00:05 [core.py:586] EngineCore failed to start.", "error"),
        ("INFO 2024-12-02 10:00:00,123 controller 412 -- Deploying new version of Deployment(name='Model')", "info"),
        ("2024-12-02 10:00:00,123\tWARNING monitor.py:512 -- Resource demands unfulfilled", "warning"),
        ("[2024-12-02 10:00:00,123 E 412 433] (raylet) node_manager.cc:3034: Worker OOM-killed", "error"),
        ("[2024-12-02 10:00:00,123 I 412 433] (gcs_server) gcs_server.cc:120: GCS started", "info"),
        ("I1202 10:00:00.123456  412 main.cc:12] started", "info"),
        ("E1202 10:00:00.123456  412 main.cc:13] failed", "error"),
        ("W1202 10:00:00.123456  412 main.cc:13] slow", "warning"),
        ("F1202 10:00:00.123456  412 main.cc:13] Check failed", "crit"),
        ("ERROR:root:something broke", "error"),
        ("CRITICAL:vllm:out of memory", "crit"),
        ("2024-12-02 10:00:00,123 - transformers - WARNING - slow tokenizer", "warning"),
        ("[INFO] listening", "info"),
        ('{"level": "warn", "msg": "disk slow"}', "warning"),
        ('{"levelname": "ERROR", "message": "x"}', "error"),
        ('{"msg": "no level here"}', UNKNOWN),
        ("ts=2024-12-02T10:00:00Z level=error msg=boom", "error"),
        ("Traceback (most recent call last):", "error"),
        ("hello from print()", UNKNOWN),
        ("Information is power", UNKNOWN),
        ("", UNKNOWN),
        ("{not json", UNKNOWN),
    ],
)
def test_the_level_of_common_shapes(line, level):
    assert level_of(line) == level
    assert level == UNKNOWN or level in LEVELS


def test_every_level_is_in_the_bounded_set():
    for word in ("TRACE", "DEBUG", "NOTICE", "ALERT", "EMERG", "PANIC", "FATAL", "CRIT", "ERR", "WARN"):
        assert level_of(f"{word} 12-02 10:00:00 [x.py:1] y") in LEVELS


def test_the_process_prefix_is_seen_through():
    found = shape("(ServeReplica:default:Model pid=1234, ip=10.0.0.2) INFO 2024-12-02 10:00:00,1 replica -- hi")
    assert found.process == "(ServeReplica:default:Model pid=1234, ip=10.0.0.2) "
    assert found.prefixed and found.level == "info"
    assert shape("(pid=412) Traceback (most recent call last):").process == "(pid=412) "
    assert shape("(pid=412, ip=10.0.0.2)   File x").body == "  File x"


def feed(joiner: Joiner, lines: list[str], t0: float = 0.0):
    out = []
    for i, line in enumerate(lines):
        out += joiner.add(line, 1000 + i, i, t0 + i * 0.01)
    return out


def test_a_bare_traceback_is_one_entry_with_level_error():
    joiner = Joiner()
    out = feed(joiner, ["INFO 12-02 10:00:00 [a.py:1] before", *TRACEBACK, "INFO 12-02 10:00:09 [a.py:2] after"])
    out.append(joiner.flush())
    assert [j.text for j in out] == [
        "INFO 12-02 10:00:00 [a.py:1] before",
        "\n".join(TRACEBACK),
        "INFO 12-02 10:00:09 [a.py:2] after",
    ]
    assert [j.level for j in out] == ["info", "error", "info"]
    assert (out[1].ts_ns, out[1].first_position, out[1].last_position) == (1001, 1, len(TRACEBACK))


def test_a_logged_exception_joins_its_head_and_stays_apart_from_other_records():
    joiner = Joiner()
    head = "2024-12-02 10:00:00,123\tERROR worker.py:88 -- Task failed"
    out = feed(joiner, [head, *TRACEBACK, "2024-12-02 10:00:01,000\tINFO worker.py:90 -- retrying"])
    assert [j.text for j in out] == ["\n".join([head, *TRACEBACK])]
    assert out[0].level == "error"


def test_vllm_repeats_its_header_on_every_line_of_a_record():
    header = "(EngineCore_0 pid=412) ERROR 12-02 10:00:05 [core.py:586] "
    record = [header + line for line in ["EngineCore failed to start.", *TRACEBACK]]
    same_place = "(EngineCore_0 pid=412) ERROR 12-02 10:00:05 [core.py:586] EngineCore failed again."
    joiner = Joiner()
    out = feed(joiner, [*record, same_place])
    out.append(joiner.flush())
    assert [j.text for j in out] == ["\n".join(record), same_place]
    assert out[0].level == "error"


def test_interleaved_workers_are_never_joined():
    joiner = Joiner()
    a = "(ServeReplica:app:A pid=1) ERROR 2024-12-02 10:00:00,1 replica -- failed"
    b = "(ServeReplica:app:B pid=2)   File x"
    out = feed(joiner, [a, b])
    assert [j.text for j in out] == [a]
    assert joiner.flush().text == b


def test_plain_prints_stay_apart_but_unprefixed_lines_after_a_prefixed_one_join():
    joiner = Joiner()
    out = feed(joiner, ["out-one", "out-two"])
    assert [j.text for j in out] == ["out-one"]
    joiner.flush()
    out = feed(joiner, ["WARNING 12-02 10:00:00 [a.py:1] config:", "model: llama", "INFO 12-02 10:00:00 [a.py:2] x"])
    assert [j.text for j in out] == ["WARNING 12-02 10:00:00 [a.py:1] config:\nmodel: llama"]


def test_the_wait_bound_releases_an_entry_only_after_quiet():
    joiner = Joiner(wait_s=1.0)
    joiner.add("ERROR 12-02 10:00:00 [a.py:1] failed", 1, 1, now=10.0)
    joiner.add("Traceback (most recent call last):", 2, 2, now=10.5)
    assert joiner.due(11.2) is None  # 0.7 s after the last line
    assert joiner.deadline == 11.5
    got = joiner.due(11.5)
    assert got is not None and got.lines == 2 and joiner.deadline is None


def test_size_bounds_cut_the_entry_and_mark_the_next():
    joiner = Joiner(max_lines=500)
    out = feed(joiner, ["ERROR 12-02 10:00:00 [a.py:1] many frames"] + [f"  frame {i}" for i in range(1200)])
    out.append(joiner.flush())
    assert [j.lines for j in out] == [500, 500, 201]
    assert out[1].text.startswith(CONTINUED + "  frame 499") and out[2].text.startswith(CONTINUED)
    assert {j.level for j in out} == {"error"}
    assert joiner.cuts == 2

    joiner = Joiner(max_bytes=64 * 1024)
    big = ["WARNING 12-02 10:00:00 [a.py:1] dump"] + ["  " + "x" * 998 for _ in range(200)]
    out = feed(joiner, big)
    out.append(joiner.flush())
    assert all(len(j.text.encode()) <= 64 * 1024 for j in out)
    assert sum(j.lines for j in out) == len(big) and len(out) == 4


def test_turned_off_every_line_is_its_own_entry_with_its_level():
    joiner = Joiner(enabled=False)
    out = feed(joiner, ["ERROR 12-02 10:00:00 [a.py:1] failed", *TRACEBACK[:3]])
    assert [j.text for j in out] == ["ERROR 12-02 10:00:00 [a.py:1] failed", *TRACEBACK[:3]]
    assert [j.level for j in out] == ["error", "error", UNKNOWN, UNKNOWN]
    assert joiner.flush() is None


def test_hostile_lines_never_raise():
    joiner = Joiner()
    for line in ["{" * 70_000, "{" + '"level": 5}', "(x pid=" + "9" * 50 + ") INFO", "\x00\x00", "[" * 1000, "\udcff"]:
        joiner.add(line, 1, 1, 0.0)
        level_of(line)
    assert joiner.flush() is not None
