"""FADEN_NODE_AGENT_LABELS: `key=value,...`, validated and bounded; a bad pair is one line that
names it (and the variable), and `faden-agent config` shows the labels as they were given."""

from __future__ import annotations

import pytest

from faden_agent.config import MAX_LABELS, ConfigError, load_config, node_labels


def test_pairs_are_read_sorted_with_spaces_and_an_empty_item_left_out():
    assert node_labels("rack=r12, zone = eu-1,,row=3,") == (("rack", "r12"), ("row", "3"), ("zone", "eu-1"))
    assert node_labels("") == ()
    assert node_labels("topology.kubernetes.io/zone=b,empty=") == (("empty", ""), ("topology.kubernetes.io/zone", "b"))


@pytest.mark.parametrize(
    ("raw", "named"),
    [
        ("rack", "'rack' has no ="),
        ("ra ck=1", "'ra ck=1'"),
        ("rack=r 12", "'rack=r 12'"),
        ("-rack=1", "'-rack=1'"),
        ("rack=1,rack=2", "'rack' is given twice"),
        ("k=" + "v" * 64, "at most 63"),
        ("k" * 64 + "=v", "1-63"),
        ("rack=a\nb", "'rack=a\\nb'"),
        (",".join(f"k{i}=v" for i in range(MAX_LABELS + 1)), f"at most {MAX_LABELS} labels"),
    ],
)
def test_a_bad_pair_is_one_line_naming_it(raw, named):
    with pytest.raises(ConfigError) as caught:
        load_config({"FADEN_NODE_AGENT_LABELS": raw})
    message = str(caught.value)
    assert "\n" not in message and message.startswith("FADEN_NODE_AGENT_LABELS=") and named in message


def test_the_setting_round_trips_through_faden_agent_config(tmp_path):
    config = load_config({"FADEN_NODE_AGENT_LABELS": "row=3,rack=r12", "FADEN_NODE_AGENT_DATA_NICS": "eth1,ibp1s0"})
    assert dict(config.labels) == {"rack": "r12", "row": "3"}
    shown = config.redacted()
    assert shown["FADEN_NODE_AGENT_LABELS"] == "rack=r12,row=3"
    assert shown["FADEN_NODE_AGENT_DATA_NICS"] == "eth1,ibp1s0"
    with pytest.raises(ConfigError, match="interface names"):
        load_config({"FADEN_NODE_AGENT_DATA_NICS": "eth1,../x"})
    assert load_config({"FADEN_NODE_AGENT_IB_MIN_PORTS": "auto"}).ib_min_ports is None
    assert load_config({"FADEN_NODE_AGENT_IB_MIN_RATE_GBPS": "200"}).ib_min_rate_gbps == 200.0
    with pytest.raises(ConfigError, match="auto or a whole number"):
        load_config({"FADEN_NODE_AGENT_IB_MIN_PORTS": "-1"})
