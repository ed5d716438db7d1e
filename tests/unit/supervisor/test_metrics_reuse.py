"""A worker's section of the scrape is reused while its status is equal and rebuilt when a figure,
its standing or its memory changed."""

from __future__ import annotations

import copy

from prometheus_client.parser import text_string_to_metric_families

from faden_agent.supervisor.metrics.exposition import text_0_0_4
from faden_agent.supervisor.metrics.families import families
from tests.support.metricstables import full_table, samples_of


def test_a_section_is_reused_only_while_its_worker_sent_no_new_status():
    reuse: dict = {}
    table = full_table()
    first = list(families(table, {}, reuse))
    again = list(families(table, {}, reuse))
    link_first = next(f for f in first if f.name == "faden_agent_outbox_records")
    assert next(f for f in again if f.name == "faden_agent_outbox_records") is link_first
    assert text_0_0_4(first) == text_0_0_4(again)
    stream = next(w for w in table["workers"] if w["name"] == "stream")
    stream["status"] = {"link": {"state": "connected"}, "outbox": {"records": 7}}  # a new liveness message
    samples = {}
    for family in text_string_to_metric_families(text_0_0_4(families(table, {}, reuse)).decode()):
        for sample in family.samples:
            samples[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    assert samples[("faden_agent_outbox_records", ())] == 7
    assert samples[("faden_agent_link_state", (("state", "connected"),))] == 1


def test_a_resent_equal_status_reuses_its_section_and_a_changed_figure_rebuilds_it():
    reuse: dict = {}
    table = full_table()
    first = list(families(table, {}, reuse))
    stream = next(w for w in table["workers"] if w["name"] == "stream")
    inventory = next(w for w in table["workers"] if w["name"] == "inventory")
    stream["status"] = copy.deepcopy(stream["status"])  # the next liveness message, same figures
    inventory["status"] = {**copy.deepcopy(inventory["status"]), "last_age_s": 9.5}  # only its age moved
    again = list(families(table, {}, reuse))
    for name in ("faden_agent_outbox_records", "faden_agent_disk_size_bytes", "faden_agent_gpu_health"):
        assert next(f for f in again if f.name == name) is next(f for f in first if f.name == name)
    stream["status"] = copy.deepcopy(stream["status"])
    stream["status"]["outbox"]["records"] = 5  # deep inside the section: equality sees it
    inventory["status"] = copy.deepcopy(inventory["status"])
    inventory["status"]["gauges"]["disks"][0]["total"] = 10
    samples = samples_of(text_0_0_4(families(table, {}, reuse)))
    assert samples[("faden_agent_outbox_records", ())] == 5
    assert samples[("faden_agent_disk_size_bytes", (("path", "/x"), ("role", "state")))] == 10


def test_worker_standing_and_memory_sections_follow_a_restart_and_a_new_pss():
    reuse: dict = {}
    table = full_table()
    samples_of(text_0_0_4(families(table, {"logs": (1.0, 10, 20)}, reuse)))
    logs_row = next(w for w in table["workers"] if w["name"] == "logs")
    logs_row.update(state="RUNNING", restarts=4, last_exit="exit 3", exit_cause="exit_3", alive_age_s=2.0)
    samples = samples_of(text_0_0_4(families(table, {"logs": (1.5, 10, 30)}, reuse)))
    assert samples[("faden_agent_worker_state", (("state", "RUNNING"), ("worker", "logs")))] == 1
    assert samples[("faden_agent_worker_state", (("state", "FATAL"), ("worker", "logs")))] == 0
    assert samples[("faden_agent_worker_restarts_total", (("worker", "logs"),))] == 4
    assert samples[("faden_agent_worker_last_exit", (("cause", "exit_3"), ("worker", "logs")))] == 1
    assert samples[("faden_agent_worker_liveness_age_seconds", (("worker", "logs"),))] == 2.0
    assert samples[("faden_agent_process_cpu_seconds_total", (("process", "logs"),))] == 1.5
    assert samples[("faden_agent_process_proportional_memory_bytes", (("process", "logs"),))] == 30
