"""The pods phase: whole pods through containerd's CRI, what a user waits for.

Each mode gets its own throwaway containerd node (:mod:`cnichain.tools.containerd_node`: a fresh
network namespace, a private mount namespace, containerd 2.x from ``--containerd-dir``, by default
sid's that ``./run`` unpacked) running that mode's chain -- the same conflist the chain phase ran,
so the reference modes run bridge, host-local, portmap (on their backend), bandwidth and tuning of
the reference and leave route-override out.  cold and warm differ only in the environment
containerd hands to the plugins: cold never forwards to an agent, warm forwards to the run's agent.
containerd finds ``loopback`` (which it runs for every pod's ``lo``) in the first reference's
directory, after ours.

A pod is what the kubelet sends for a pod with a hostPort and the bandwidth annotations.  Per pod,
modes interleaved pod by pod: the wall time of ``RunPodSandbox`` (the sandbox and its network, CNI
ADD of the whole chain included), of ``StopPodSandbox`` + ``RemovePodSandbox`` (CNI DEL), and both.
The sandbox itself (runc starting the pause process) is in every mode's numbers alike.
"""

from __future__ import annotations

import os
from typing import Optional

from cnichain.benchmarks.latency.session import Bench, Mode
from cnichain.benchmarks.measure import clock
from cnichain.tools import debcache
from cnichain.tools.containerd_node.cri_pods import Pod, Port
from cnichain.tools.containerd_node.node import CriNode
from cnichain.tools.lab import isolate_conflist

HOST_PORT_BASE = 31000
BANDWIDTH = {"kubernetes.io/ingress-bandwidth": "100M", "kubernetes.io/egress-bandwidth": "100M"}


def containerd_dir(spec: str) -> Optional[str]:
    """``debian:SUITE`` -> that suite's unpacked containerd; a directory as is (None when absent)."""
    if spec.startswith(debcache.SUITE_PREFIX):
        return debcache.containerd_bin_dir(spec[len(debcache.SUITE_PREFIX):])
    return spec


def pod_spec(i: int) -> Pod:
    """Pod ``i`` as the kubelet describes it: one hostPort, ingress and egress bandwidth limits."""
    return Pod(name=f"bench-{i}", namespace="bench", ports=[Port(80, HOST_PORT_BASE + i)], annotations=dict(BANDWIDTH))


def cni_bin_dirs(bench: Bench, mode: Mode) -> list[str]:
    """The mode's plugin directories, then the first reference's for ``loopback`` when it lacks one."""
    dirs = list(mode.bin_dirs)
    if not any(os.path.isfile(os.path.join(d, "loopback")) for d in dirs) and bench.primary_reference_dir:
        dirs.append(bench.primary_reference_dir)
    return dirs


def start_nodes(bench: Bench, bin_dir: str) -> dict[str, CriNode]:
    """One ready containerd node per mode; a mode whose node does not come up is noted and left out."""
    nodes: dict[str, CriNode] = {}
    archive = os.path.join(bench.lab.workdir, "busybox-oci.tar")
    for k, mode in enumerate(bench.modes.values()):
        workdir = os.path.join(mode.workdir, "pods")
        os.makedirs(workdir, mode=0o700, exist_ok=True)
        conflist = isolate_conflist(mode.chain.raw, workdir)
        node = CriNode(bench.lab.netns(f"pods-{k}"), workdir, bin_dir, cni_bin_dirs(bench, mode), conflist,
                       dict(mode.runtime.extra_env), f"/{bench.lab.name(f'pods-{k}')}", archive)
        bench.cleanup.append(_Closing(node))
        bench.progress(f"[pods] starting containerd for {mode.name}")
        try:
            bench.pods_runtime["version"] = node.start()
        except Exception as exc:  # noqa: BLE001 - any failure to come up leaves the mode out, said why
            bench.error("pods", mode.name, "containerd node start", exc)
            bench.notes.append(f"pods: {mode.name} left out, its containerd did not come up: {str(exc)[:200]}")
            continue
        nodes[mode.name] = node
    return nodes


class _Closing:
    """A node as one of the bench's cleanup context managers."""

    def __init__(self, node: CriNode) -> None:
        self.node = node

    def __exit__(self, *exc: object) -> None:
        self.node.close()


def run_pods(bench: Bench) -> None:
    where = containerd_dir(bench.o.containerd_dir)
    if not where or not os.path.isfile(os.path.join(where, "containerd")):
        bench.notes.append(f"pods skipped: no containerd in {where or bench.o.containerd_dir} "
                           "(./run bench unpacks sid's)")
        return
    bench.pods_runtime.update(name="containerd", bin_dir=where)
    nodes = start_nodes(bench, where)
    n = bench.o.pods_e2e
    for i in range(n):
        for mode in bench.ordered(i):
            if mode.name in nodes:
                _one_pod(bench, mode, nodes[mode.name], i)
        last = {r["mode"]: r for r in bench.pod_rows[-len(nodes):]} if nodes else {}
        bench.progress(f"[pods] pod {i + 1}/{n}  " + "  ".join(
            f"{m} {r['total'] * 1000:.0f} ms" for m, r in last.items() if r["ok"]))
    bench.progress(f"[pods] done: {n} pods", final=True)


def _one_pod(bench: Bench, mode: Mode, node: CriNode, i: int) -> None:
    cri = node.cri
    assert cri is not None
    row = {"mode": mode.name, "pod": i, "ok": False, "run": 0.0, "stop_remove": 0.0, "total": 0.0}
    sandbox = ""
    try:
        started = clock()
        sandbox = cri.run_pod(pod_spec(i))
        ran = clock()
        cri.stop_pod(sandbox)
        cri.remove_pod(sandbox)
        done = clock()
        row.update(ok=True, run=ran - started, stop_remove=done - ran, total=done - started)
    except Exception as exc:  # noqa: BLE001 - a failed pod is an error of the run, with containerd's word on it
        bench.error("pods", mode.name, f"pod {i}" + (f" (sandbox {sandbox[:12]})" if sandbox else ""),
                    RuntimeError(f"{exc}; containerd log tail: {node.log_tail(5)[-600:]}"))
    bench.pod_rows.append(row)
