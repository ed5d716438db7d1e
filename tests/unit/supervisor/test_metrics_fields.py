"""Every metric family's declared `field` is a path the workers' status types have
(protocol/status.py), resolved as declared.py reads it: a number, per key (`*`), per item
(`[]`) with the item's label keys, a word of `states`, a flag. A renamed status key fails here,
not as an empty family in production."""

from __future__ import annotations

import types
from typing import Any, NotRequired, Required, Union, get_args, get_origin, get_type_hints, is_typeddict

import pytest

from faden_agent.protocol import status
from faden_agent.protocol.metrics import BY_NAME, METRICS, Metric
from faden_agent.supervisor.metrics.declared import lead_keys, path_of
from faden_agent.supervisor.metrics.families import SOURCES

# The status paths the supervisor's own producers read (families.py), as plain keys.
PRODUCER_READS = {
    "commands_ended": ("executor", "commands.ended"),
    "log_push_duration_seconds": ("logs", "push_seconds"),
    "peer_transfers": ("peer", "transfers_served"),
    "gpu": ("inventory.gauges", "gpu.devices"),
}


class NoSuchPath(Exception):
    pass


def bare(hint: Any) -> Any:
    """The type under NotRequired/Required and without None."""
    while get_origin(hint) in (NotRequired, Required):
        (hint,) = get_args(hint)
    if get_origin(hint) in (Union, types.UnionType):
        kept = [arg for arg in get_args(hint) if arg is not type(None)]
        return kept[0] if len(kept) == 1 else Union[tuple(kept)]  # noqa: UP007 - built from a list
    return hint


def keys_of(hint: Any, where: str) -> dict[str, Any]:
    if not is_typeddict(hint):
        raise NoSuchPath(f"{where}: {getattr(hint, '__name__', hint)} has no keys")
    return get_type_hints(hint, include_extras=True)


def walk(hint: Any, steps: list[str], where: str) -> Any:
    for step in steps:
        keys = keys_of(hint, where)
        if step not in keys:
            raise NoSuchPath(f"{where}: {step!r} is no key of {hint.__name__}")
        hint = bare(keys[step])
    return hint


def inner(hint: Any, container: type, where: str) -> Any:
    """The value type of a dict[str, X] (the item type of a list[X])."""
    if get_origin(hint) is not container:
        raise NoSuchPath(f"{where}: {getattr(hint, '__name__', hint)} is no {container.__name__}")
    return bare(get_args(hint)[-1])


def source_type(source: str) -> Any:
    worker, _, part = source.partition(".")
    if worker not in status.WORKER_STATUS:
        raise NoSuchPath(f"source {source!r}: no worker status type")
    return walk(status.WORKER_STATUS[worker], part.split(".") if part else [], source)


def is_number(hint: Any) -> bool:
    parts = get_args(hint) if get_origin(hint) in (Union, types.UnionType) else (hint,)
    return all(part in (int, float) for part in parts)


def check(metric: Metric) -> None:
    """Raises NoSuchPath when the family's field is no path of its source's status type, or
    leads to a value declared.py cannot read for that family."""
    where = f"{metric.name} ({metric.source}: {metric.field})"
    path = path_of(metric.field)
    hint = source_type(metric.source)
    if path.items is not None:
        hint = inner(walk(hint, path.items, where), list, where)
        for key in lead_keys(metric):
            walk(hint, [key], where)
    leaves = [walk(hint, path.steps, where)]
    if path.keyed:  # a dict[str, X], or a TypedDict whose every key is a sample
        under = leaves[0]
        values = (
            [bare(v) for v in keys_of(under, where).values()] if is_typeddict(under) else [inner(under, dict, where)]
        )
        leaves = [walk(value, path.after, where) for value in values]
    for leaf in leaves:
        if metric.states:
            wanted, ok = "a word", leaf is str
        elif metric.flag:
            wanted, ok = "a flag", leaf is bool
        else:
            wanted, ok = "a number", is_number(leaf)
        if not ok:
            raise NoSuchPath(f"{where}: {getattr(leaf, '__name__', leaf)} where {wanted} is read")


@pytest.mark.parametrize("metric", [m for m in METRICS if m.field], ids=lambda m: m.name)
def test_each_declared_field_is_a_path_of_its_workers_status(metric):
    check(metric)


@pytest.mark.parametrize("name", sorted(PRODUCER_READS))
def test_what_each_producer_reads_is_a_path_of_the_status(name):
    source, keys = PRODUCER_READS[name]
    assert BY_NAME[name].source == source and not BY_NAME[name].field
    walk(source_type(source), keys.split("."), name)


def test_every_source_a_family_is_read_from_has_a_status_type():
    assert {m.source for m in METRICS if m.source} <= set(SOURCES)
    for source in SOURCES:
        source_type(source)
    assert sorted(PRODUCER_READS) == sorted(m.name for m in METRICS if m.source and not m.field)


@pytest.mark.parametrize(
    ("name", "wrong", "says"),
    [
        ("link_reconnects", "link.reconects", "'reconects' is no key of LinkSnapshot"),
        ("link_reconnects", "link.backend_url", "str where a number is read"),
        ("log_lines_read", "sources.*.lines_red", "'lines_red' is no key of LogSourceStatus"),
        ("disk_free_bytes", "disk[].free", "'disk' is no key of InventoryGauges"),
        ("gpu_xid_errors", "gpu.devices[].errors.xids.*", "'xids' is no key of GpuErrors"),
        ("link_state", "link.shutting_down", "bool where a word is read"),
        ("workload_stalled", "workloads[].scrape", "str where a flag is read"),
        ("commands_running", "commands.received", "dict"),
        ("peer_unauthenticated_budget", "connections.*", "where a number is read"),
    ],
)
def test_an_injected_wrong_path_fails(name, wrong, says):
    with pytest.raises(NoSuchPath, match=None) as raised:
        check(BY_NAME[name]._replace(field=wrong))
    assert says in str(raised.value)


def test_a_wrong_item_label_key_fails():
    metric = BY_NAME["disk_free_bytes"]._replace(item_labels=("path", "rol"))
    with pytest.raises(NoSuchPath, match="'rol' is no key of DiskGauges"):
        check(metric)
