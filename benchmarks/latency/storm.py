"""The storm phase: N pods' chains at once (a node after a reboot or a drain), the agent under the
shipped limits.

For each width (``--storm``, default 32 and 64) every mode ADDs that many pods at once, then DELs
them at once; the numbers are the wall times of the two batches, side by side, and the CPU the
whole node spent on each batch (``/proc/stat``), per pod: what a pod costs a busy node, split into
the runtime's own share (this process: the same work in every mode), the warm agent's (its process
tree) and the rest (the plugins' processes -- shims or the reference's binaries -- and the kernel's
deferred work).  The warm mode's agent runs in a memory cgroup set to the DaemonSet's limit for
its container with its CPU quota (``--agent-memory-limit``, ``--agent-cpus``; tools/memcg.py), so
each batch also reports what the agent's cgroup peaked at, how many of its processes the OOM killer
took, and its queue, as its metrics endpoint shows them.  The idle footprint is read once, after
the agent's pool is warm.
"""

from __future__ import annotations

import resource
import time
from typing import Any, Optional

from cnichain.benchmarks.latency.phases import pod_netns, pods_at_once
from cnichain.benchmarks.latency.session import Bench, Mode
from cnichain.benchmarks.measure import process_tree_cpu, system_cpu

STORM_POD_BASE = 2000  # container numbers of the storm phase, distinct from the other phases'
IDLE_WAIT = 60.0  # seconds for the agent's pool to be warm before its idle footprint is read


def _gauge(text: str, name: str) -> Optional[float]:
    for line in text.splitlines():
        if line.startswith(name + " "):
            return float(line.split()[1])
    return None


def agent_view(bench: Bench) -> dict:
    """What the warm agent's cgroup and metrics say now ({} without a cgroup)."""
    cg, agent = getattr(bench, "agent_cgroup", None), getattr(bench, "agent", None)
    if cg is None:
        return {}
    view: dict[str, Any] = {"usage_mib": cg.usage() / 2**20, "peak_mib": cg.peak() / 2**20,
                            "oom_kills": cg.oom_kills(), "limit_mib": cg.limit / 2**20}
    if agent is not None:
        text = agent.metrics()
        for key, name in (("queue", "cnichain_agent_queue"), ("queue_peak", "cnichain_agent_queue_peak"),
                          ("queued_total", "cnichain_agent_queued_total"),
                          ("pool_memory_mib", "cnichain_agent_pool_memory_bytes"),
                          ("capacity", "cnichain_agent_capacity_workers")):
            value = _gauge(text, name)
            if value is not None:
                view[key] = value / 2**20 if key.endswith("_mib") else value
    return view


def read_idle(bench: Bench) -> None:
    """The warm agent's idle footprint: its cgroup's charge once its pool is warm."""
    agent = getattr(bench, "agent", None)
    if agent is None or getattr(bench, "agent_cgroup", None) is None:
        return
    deadline = time.monotonic() + IDLE_WAIT
    want = f'cnichain_agent_workers{{state="idle"}} {bench.agent_pool}'
    while time.monotonic() < deadline and want not in agent.metrics():
        time.sleep(0.2)
    time.sleep(1.0)  # the last worker's "ready" and its pages settle
    bench.agent_idle = agent_view(bench)


def run_storm(bench: Bench) -> None:
    """Each width: every mode's ADD of that many pods at once, then their DEL at once."""
    for width in bench.o.storm:
        for mode in bench.ordered(width):
            for command in ("ADD", "DEL"):
                row = _batch(bench, mode, width, command)
                bench.storm.append(row)
                bench.progress(f"[storm] {mode.name} {command} x{width}: {row['wall_seconds'] * 1000:.0f} ms, "
                               f"{row['cpu_seconds'] * 1000 / width:.1f} ms of the node's CPU per pod"
                               + (f", agent peak {row['agent']['peak_mib']:.0f} MiB" if row.get("agent") else ""))
    bench.progress("[storm] done", final=True)


def _own_cpu() -> float:
    """This process's CPU: the runtime's own share of a batch (its threads build each request,
    write the cache, fork and wait), which every mode pays alike."""
    used = resource.getrusage(resource.RUSAGE_SELF)
    return used.ru_utime + used.ru_stime


def _batch(bench: Bench, mode: Mode, width: int, command: str) -> dict:
    warm = mode.name == "warm"
    cg = getattr(bench, "agent_cgroup", None) if warm else None
    if cg is not None:
        cg.reset_peak()
    oom_before = cg.oom_kills() if cg is not None else 0
    agent = getattr(bench, "agent", None) if warm else None
    for j in range(width):
        # The pods' sandboxes exist before their CNI ADD, as a runtime creates them first: making
        # a network namespace (an `ip` exec and the kernel's set-up) is not the chain's work.
        pod_netns(bench, mode, j)
    agent_before = process_tree_cpu(agent.pid) if agent is not None else 0.0
    runtime_before = _own_cpu()
    cpu_before = system_cpu()
    wall, failed = pods_at_once(bench, mode, command, STORM_POD_BASE, width, "storm", f"x{width} {command}")
    row: dict[str, Any] = {"mode": mode.name, "pods": width, "command": command, "wall_seconds": wall,
                           "cpu_seconds": system_cpu() - cpu_before, "runtime_cpu_seconds": _own_cpu() - runtime_before,
                           "failed": failed}
    if agent is not None:
        row["agent_cpu_seconds"] = process_tree_cpu(agent.pid) - agent_before
    if cg is not None:
        view = agent_view(bench)
        view["oom_kills"] = view.get("oom_kills", 0) - oom_before
        row["agent"] = view
    return row
