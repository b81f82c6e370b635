"""The agent's budget: the memory limit and CPUs read from its own cgroup (v1 and v2 layouts built
in a temporary directory), the flag when there is no limit, and the workers that fit."""

from __future__ import annotations

import os

from cnichain.agent import budget


def _write(path: str, text: str) -> None:
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as fh:
        fh.write(text + "\n")


def test_v1_limit_is_the_smallest_along_the_path(tmp_path):
    root = str(tmp_path)
    _write(f"{root}/memory/kubepods/memory.limit_in_bytes", str(1 << 30))
    _write(f"{root}/memory/kubepods/pod1/agent/memory.limit_in_bytes", str(512 << 20))
    _write(f"{root}/memory/memory.limit_in_bytes", "9223372036854771712")  # v1's "no limit"
    text = "9:cpu,cpuacct:/kubepods/pod1/agent\n4:memory:/kubepods/pod1/agent\n0::/\n"
    assert budget.memory_limit(text, root) == (512 << 20, "cgroup v1 memory.limit_in_bytes")


def test_v2_limit_and_max(tmp_path):
    root = str(tmp_path)
    _write(f"{root}/kubepods.slice/agent/memory.max", str(256 << 20))
    _write(f"{root}/kubepods.slice/memory.max", "max")
    assert budget.memory_limit("0::/kubepods.slice/agent\n", root) == (256 << 20, "cgroup v2 memory.max")
    _write(f"{root}/other/memory.max", "max")
    assert budget.memory_limit("0::/other\n", root) == (0, "")


def test_namespaced_path_reads_the_mount_root(tmp_path):
    """In a pod with its own cgroup namespace the path it sees is "/" or one the mount lacks."""
    root = str(tmp_path)
    _write(f"{root}/memory.max", str(300 << 20))
    assert budget.memory_limit("0::/\n", root)[0] == 300 << 20


def test_cpu_quota_lowers_the_affinity(tmp_path):
    root = str(tmp_path)
    _write(f"{root}/cpu,cpuacct/agent/cpu.cfs_quota_us", "150000")
    _write(f"{root}/cpu,cpuacct/agent/cpu.cfs_period_us", "100000")
    assert budget.usable_cpus("3:cpu,cpuacct:/agent\n", root) == min(2, len(os.sched_getaffinity(0)))
    _write(f"{root}/agent2/cpu.max", "100000 100000")
    assert budget.usable_cpus("0::/agent2\n", root) == 1
    _write(f"{root}/agent3/cpu.max", "max 100000")
    assert budget.usable_cpus("0::/agent3\n", root) == len(os.sched_getaffinity(0))


def test_capacity_is_bounded_by_memory_and_cpus():
    assert budget.capacity(512 << 20, 2) == 7  # the DaemonSet's limit on a 2-core node
    assert budget.capacity(512 << 20, 64) == budget.capacity(512 << 20, 8)  # memory bounds it
    assert budget.capacity(4 << 30, 2) == 7  # CPUs bound it
    assert budget.capacity(64 << 20, 1) == budget.MIN_WORKERS  # never fewer than a bridge and its IPAM


def test_detect_falls_back_to_the_flag(monkeypatch):
    monkeypatch.setattr(budget, "memory_limit", lambda *a: (0, ""))
    got = budget.detect(1 << 30)
    assert got.limit == 1 << 30 and got.source == "--memory-budget" and got.workers >= budget.MIN_WORKERS
