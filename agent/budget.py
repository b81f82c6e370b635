"""How many workers the agent may run at once: from the memory and the CPUs its container gives it.

Each request in flight costs one worker and the pages it stops sharing with the agent (~13 MiB
measured for the default chain), while on a few cores more workers than a handful add no
throughput (the kernel work serializes on RTNL).  So the pool is bounded by the smaller of two
numbers: what fits in half the container's memory limit once the agent's own footprint is paid
(the other half is headroom: a worker's peak inside a request, page cache of the plugins' files,
the reconciler's sweep), and a few workers per usable CPU.  Requests beyond that wait for a warm
worker in the agent's bounded queue (:mod:`inflight`) instead of forking more.

The limit is the container's own: cgroup v2 ``memory.max`` or v1 ``memory.limit_in_bytes`` of the
cgroup this process is in (the smallest along its path up to the hierarchy's root), else
``--memory-budget``.  The CPUs are the affinity mask, lowered by a CFS quota (v2 ``cpu.max``, v1
``cpu.cfs_quota_us``/``cpu.cfs_period_us``).  Reading these is a handful of small files once, at
start; nothing here runs per request.
"""

from __future__ import annotations

import os
from typing import Optional

from cnichain.common.record import FrozenRecord

CGROUP_ROOT = "/sys/fs/cgroup"
UNLIMITED = 1 << 60  # v1 reports "no limit" as a page-rounded 2^63-1; anything this large is none

AGENT_BASE = 64 << 20  # the idle agent (~47 MiB measured: interpreter, plugins, reconciler) plus slack
PER_WORKER = 24 << 20  # a worker's private memory at its peak inside a request, with margin (~13 MiB)
BUDGET_SHARE = 0.5  # of the limit: the rest is headroom, never planned for
WORKERS_PER_CPU = 3  # beyond this the kernel work (RTNL) serializes and more only costs memory
MIN_WORKERS = 2  # a bridge and its IPAM delegate, on the smallest node


class Budget(FrozenRecord):
    """The limit the agent plans within, where it came from, its CPUs, and the workers that fit."""

    __slots__ = _fields = ("limit", "source", "cpus", "workers")

    limit: int  # bytes
    source: str  # "cgroup v1 memory.limit_in_bytes", "cgroup v2 memory.max" or "--memory-budget"
    cpus: int
    workers: int

    def __init__(self, limit: int, source: str, cpus: int, workers: int) -> None:
        self._assign(limit=limit, source=source, cpus=cpus, workers=workers)

    def describe(self) -> str:
        return (f"budget {self.limit >> 20} MiB ({self.source}), {self.cpus} CPU(s): "
                f"at most {self.workers} worker(s) at once")


def capacity(limit: int, cpus: int) -> int:
    """Workers that fit: ``limit`` * :data:`BUDGET_SHARE` less the agent, per worker; and per CPU."""
    by_memory = int((limit * BUDGET_SHARE - AGENT_BASE) // PER_WORKER)
    by_cpu = WORKERS_PER_CPU * max(1, cpus) + 1
    return max(MIN_WORKERS, min(by_memory, by_cpu))


def _read(path: str) -> str:
    try:
        with open(path) as fh:
            return fh.read().strip()
    except OSError:
        return ""


def _own_cgroups(text: str) -> dict[str, str]:
    """``/proc/self/cgroup`` as controller -> path ("" for the v2 unified hierarchy)."""
    out: dict[str, str] = {}
    for line in text.splitlines():
        parts = line.split(":", 2)
        if len(parts) != 3:
            continue
        _hid, controllers, path = parts
        for controller in (controllers.split(",") if controllers else [""]):
            out.setdefault(controller, path)
    return out


def _up(root: str, path: str) -> list[str]:
    """Directories from the cgroup at ``path`` under ``root`` up to ``root`` itself, that exist.

    In a container whose cgroup namespace hides its path the mount's root is its own cgroup, so a
    path that does not exist under the mount is read as the mount's root.
    """
    dirs = []
    rel = path.strip("/")
    while True:
        d = os.path.join(root, rel) if rel else root
        if os.path.isdir(d):
            dirs.append(d)
        if not rel:
            return dirs
        rel = os.path.dirname(rel)


def memory_limit(cgroup_text: Optional[str] = None, root: str = CGROUP_ROOT) -> tuple[int, str]:
    """(bytes, source) of the smallest memory limit over this process's cgroup path; (0, "") for none."""
    groups = _own_cgroups(_read("/proc/self/cgroup") if cgroup_text is None else cgroup_text)
    best, source = 0, ""
    if "memory" in groups:  # v1: the memory controller's own hierarchy
        for d in _up(os.path.join(root, "memory"), groups["memory"]):
            value = _read(os.path.join(d, "memory.limit_in_bytes"))
            if value.isdigit() and int(value) < UNLIMITED and (not best or int(value) < best):
                best, source = int(value), "cgroup v1 memory.limit_in_bytes"
    elif "" in groups:  # v2 only
        for d in _up(root, groups[""]):
            value = _read(os.path.join(d, "memory.max"))
            if value.isdigit() and int(value) < UNLIMITED and (not best or int(value) < best):
                best, source = int(value), "cgroup v2 memory.max"
    return best, source


def usable_cpus(cgroup_text: Optional[str] = None, root: str = CGROUP_ROOT) -> int:
    """CPUs this process may run on (affinity), lowered to a CFS quota's worth when one is set."""
    try:
        cpus = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        cpus = os.cpu_count() or 1
    groups = _own_cgroups(_read("/proc/self/cgroup") if cgroup_text is None else cgroup_text)
    quotas: list[float] = []
    v1 = groups.get("cpu", groups.get("cpuacct"))
    if v1 is not None:
        for name in ("cpu,cpuacct", "cpu"):
            for d in _up(os.path.join(root, name), v1):
                quota, period = _read(os.path.join(d, "cpu.cfs_quota_us")), _read(os.path.join(d, "cpu.cfs_period_us"))
                if quota.isdigit() and period.isdigit() and int(period):
                    quotas.append(int(quota) / int(period))
            if quotas:
                break
    elif "" in groups:
        for d in _up(root, groups[""]):
            parts = _read(os.path.join(d, "cpu.max")).split()
            if len(parts) == 2 and parts[0].isdigit() and parts[1].isdigit() and int(parts[1]):
                quotas.append(int(parts[0]) / int(parts[1]))
    if quotas:
        cpus = min(cpus, max(1, int(min(quotas) + 0.999)))
    return max(1, cpus)


def detect(fallback: int) -> Budget:
    """The agent's budget: its container's memory limit, else ``fallback`` bytes (``--memory-budget``)."""
    limit, source = memory_limit()
    if not limit:
        limit, source = fallback, "--memory-budget"
    cpus = usable_cpus()
    return Budget(limit, source, cpus, capacity(limit, cpus))


def memory_usage(cgroup_text: Optional[str] = None, root: str = CGROUP_ROOT) -> int:
    """Bytes the cgroup this process is in charges now (0 when it cannot be read): one small read."""
    groups = _own_cgroups(_read("/proc/self/cgroup") if cgroup_text is None else cgroup_text)
    if "memory" in groups:
        dirs, name = _up(os.path.join(root, "memory"), groups["memory"]), "memory.usage_in_bytes"
    elif "" in groups:
        dirs, name = _up(root, groups[""]), "memory.current"
    else:
        return 0
    value = _read(os.path.join(dirs[0], name)) if dirs else ""
    return int(value) if value.isdigit() else 0
