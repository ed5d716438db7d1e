"""The container of a GPU process from its cgroup file, in each layout (cgroup v1 and v2,
Docker's cgroupfs and systemd drivers; v1 files are fixtures read through proc_root, since
this machine's own v1 tree is tested for real in tests/integration/inventory/test_gpu_per_container.py),
and the per-container sums the inventory reports."""

from __future__ import annotations

import pytest

from faden_agent.workers.inventory.gpu.containers import (
    add_container_gpu_use,
    container_in_cgroup,
    container_of_pid,
)

ID = "a" * 63 + "1"
LAYOUTS = {
    "v1_cgroupfs": f"12:pids:/docker/{ID}\n4:memory:/docker/{ID}\n1:name=systemd:/docker/{ID}\n",
    "v1_systemd": f"12:pids:/system.slice/docker-{ID}.scope\n1:name=systemd:/system.slice/docker-{ID}.scope\n",
    "v2_cgroupfs": f"0::/docker/{ID}\n",
    "v2_systemd": f"0::/system.slice/docker-{ID}.scope\n",
    "v2_hybrid": f"4:memory:/\n0::/system.slice/docker-{ID}.scope/init\n",
    "nested": f"0::/docker/{'b' * 64}/docker/{ID}\n",
}


@pytest.mark.parametrize("layout", sorted(LAYOUTS))
def test_each_layout_names_the_container(layout):
    assert container_in_cgroup(LAYOUTS[layout]) == ID


@pytest.mark.parametrize(
    "text",
    ["0::/\n", "0::/user.slice/user-0.slice/session-1.scope\n", f"0::/docker/{ID[:-1]}\n", "garbage", ""],
)
def test_no_container(text):
    assert container_in_cgroup(text) is None


def test_a_v1_file_read_through_proc_root(tmp_path):
    (tmp_path / "4242").mkdir()
    (tmp_path / "4242" / "cgroup").write_text(LAYOUTS["v1_cgroupfs"])
    assert container_of_pid(4242, str(tmp_path)) == ID
    assert container_of_pid(4243, str(tmp_path)) is None  # gone


def test_per_container_sums_by_gpu():
    other = "c" * 64
    sections = {
        "docker": {"containers": [{"id": ID, "name": "vllm"}, {"id": other, "name": "idle"}]},
        "gpu": {
            "devices": [
                {
                    "index": 0,
                    "uuid": "GPU-0",
                    "processes": [
                        {"pid": 1, "container_id": ID, "usage": {"used_memory": 100, "utilization_sm": 30}},
                        {"pid": 2, "container_id": ID, "usage": {"used_memory": 50}},
                        {"pid": 3, "container_id": None, "usage": {"used_memory": 7}},
                    ],
                },
                {"index": 1, "uuid": "GPU-1", "processes": [{"pid": 4, "container_id": ID, "usage": {}}]},
            ]
        },
    }
    kept = sections["docker"]
    add_container_gpu_use(sections)
    vllm, idle = sections["docker"]["containers"]
    assert vllm["usage"]["gpus"] == [
        {"index": 0, "uuid": "GPU-0", "used_memory": 150, "utilization_sm": 30},
        {"index": 1, "uuid": "GPU-1", "used_memory": 0, "utilization_sm": None},
    ]
    assert "usage" not in idle and "usage" not in kept["containers"][0]  # the input is not changed
