"""The measuring phases that run the chain: floor, chain and parallel (growth has its own module).

Every phase interleaves the modes (:meth:`Bench.ordered` alternates which goes first) so machine
noise hits all of them alike, and records through :meth:`Bench.collect`, never by timing itself:
the numbers are the runtime's exec-to-exit times.
"""

from __future__ import annotations

import concurrent.futures
import sys
from typing import Optional

from cnichain.benchmarks.latency.session import Bench, Mode, Records, Sample
from cnichain.benchmarks.measure import clock, timed_exec
from cnichain.podstate.runtime import Attachment

PARALLEL_POD_BASE = 1000  # container numbers of the parallel phase, distinct from the chain phase's


def _cni_args(i: int) -> list[tuple[str, str]]:
    return [("IgnoreUnknown", "1"), ("K8S_POD_NAMESPACE", "bench"), ("K8S_POD_NAME", f"pod-{i}")]


def attachment(mode: Mode, i: int, pod: str, with_capabilities: bool = True) -> Attachment:
    """Pod ``i`` of ``mode`` in netns ``pod``: a port mapping and a bandwidth limit, as kubelet sends.

    DEL is sent without capability args: the runtime resends them from its cache, as a real one does.
    """
    capabilities = {
        "portMappings": [{"hostPort": 20000 + i, "containerPort": 80, "protocol": "tcp"}],
        "bandwidth": {"ingressRate": 100_000_000, "ingressBurst": 10_000_000,
                      "egressRate": 100_000_000, "egressBurst": 10_000_000},
    }
    return Attachment(f"bench-{mode.name}-{i}", pod, "eth0", _cni_args(i), capabilities if with_capabilities else {})


def pod_netns(bench: Bench, mode: Mode, i: int) -> str:
    """The netns of ``mode``'s pod ``i``, created on first use and reused by later phases."""
    while len(mode.pods) <= i:
        mode.pods.append(bench.lab.netns(f"p{list(bench.modes).index(mode.name)}-{len(mode.pods)}"))
    return mode.pods[i]


# -- floor ---------------------------------------------------------------------------------------
def run_floor(bench: Bench) -> None:
    """A bare interpreter start, the native shim's bare exec (when built), and every plugin's VERSION
    exec: start-up cost, no plugin work."""
    from cnichain.node.native_shim import built_binary

    python = sys.executable
    shim = built_binary()
    plugin_types = sorted({p for m in bench.modes.values() for p in m.provenance})
    n = bench.o.floor_samples
    for i in range(n):
        bench.progress(f"[floor] {i + 1}/{n}")
        bench.samples.append(Sample("python", "floor", "python -I -S -c pass", "START",
                                    timed_exec([python, "-I", "-S", "-c", "pass"]).seconds, 0))
        if shim:
            # The generic (unconfigured) binary prints one error line and exits: exec, start and exit
            # of the static executable alone, what the warm path pays before it reaches the socket.
            bench.samples.append(Sample("shim", "floor", "cnichain-shim", "START", timed_exec([shim]).seconds, 0))
        for mode in bench.ordered(i):
            for ptype in plugin_types:
                if mode.provenance.get(ptype) is None:
                    continue
                _, recs, err = bench.collect(lambda: mode.runtime.version(ptype))
                bench.keep_outcome("floor", mode.name, f"{ptype} VERSION", recs, err)
    bench.progress("[floor] done", final=True)


# -- chain ---------------------------------------------------------------------------------------
def run_chain(bench: Bench) -> None:
    """N pods through the whole conflist one after another: ADD all, then DEL in reverse."""
    n = bench.o.pods
    live: dict[str, list[int]] = {m: [] for m in bench.modes}
    for i in range(n):
        for mode in bench.ordered(i):
            att = attachment(mode, i, pod_netns(bench, mode, i))
            _, recs, err = bench.collect(lambda: mode.runtime.add(mode.chain, att))
            _total(bench, mode.name, i, "ADD", recs, err)
            bench.keep_outcome("chain", mode.name, f"pod {i} ADD", recs, err)
            live[mode.name].append(i)
        bench.progress(f"[chain] ADD pod {i + 1}/{n}  " + _last_totals(bench, "ADD"))
    for k, i in enumerate(reversed(range(n))):
        for mode in bench.ordered(k):
            if i not in live[mode.name]:
                continue
            att = attachment(mode, i, mode.pods[i], with_capabilities=False)
            _, recs, err = bench.collect(lambda: mode.runtime.delete(mode.chain, att))
            _total(bench, mode.name, i, "DEL", recs, err)
            bench.keep_outcome("chain", mode.name, f"pod {i} DEL", recs, err)
        bench.progress(f"[chain] DEL pod {k + 1}/{n}  " + _last_totals(bench, "DEL"))
    bench.progress(f"[chain] done: {n} pods", final=True)


def _total(bench: Bench, mode: str, pod: int, command: str, recs: Records, err: Optional[BaseException]) -> None:
    per = {rec.plugin: rec.seconds for _, rec in recs}
    bench.chain_totals.append({"mode": mode, "pod": pod, "command": command, "ok": err is None,
                               "seconds": sum(per.values()), "plugins": per})


def _last_totals(bench: Bench, command: str) -> str:
    parts = []
    for name in bench.modes:
        last = [t for t in bench.chain_totals if t["mode"] == name and t["command"] == command]
        if last:
            parts.append(f"{name} {last[-1]['seconds'] * 1000:.0f} ms")
    return "  ".join(parts)


# -- parallel ------------------------------------------------------------------------------------
def pods_at_once(bench: Bench, mode: Mode, command: str, base: int, width: int, phase: str, label: str) -> tuple[float, int]:
    """``width`` pods' chains at once (container numbers from ``base``), as a kubelet starting or
    stopping them together: the batch's wall time and how many failed (each outcome kept under
    ``phase``/``label``)."""
    atts = [attachment(mode, base + j, pod_netns(bench, mode, j), command == "ADD") for j in range(width)]
    op = mode.runtime.add if command == "ADD" else mode.runtime.delete

    def one(att: Attachment) -> tuple[Records, Optional[BaseException]]:
        _, recs, err = bench.collect(lambda: op(mode.chain, att))
        return recs, err

    started = clock()
    with concurrent.futures.ThreadPoolExecutor(max_workers=width) as pool:
        outcomes = list(pool.map(one, atts))
    wall = clock() - started
    failed = 0
    for recs, err in outcomes:
        bench.keep_outcome(phase, mode.name, label, recs, err)
        failed += err is not None
    return wall, failed


def run_parallel(bench: Bench) -> None:
    """Batches of pods at once (ADD batch, then DEL batch): the wall time of each batch."""
    width = bench.o.parallel
    for r in range(bench.o.parallel_rounds):
        for mode in bench.ordered(r):
            for command in ("ADD", "DEL"):
                wall, failed = pods_at_once(bench, mode, command, PARALLEL_POD_BASE, width, "parallel",
                                            f"round {r} {command}")
                bench.parallel.append({"mode": mode.name, "round": r, "command": command, "pods": width,
                                       "wall_seconds": wall, "failed": failed})
                bench.progress(f"[parallel] round {r + 1}/{bench.o.parallel_rounds} {mode.name} {command} "
                               f"x{width}: {wall * 1000:.0f} ms")
    bench.progress("[parallel] done", final=True)
