"""The growth phase: host-local and portmap ADD/DEL latency with 0, 100, 1,000 other pods present.

These are the two plugins whose work depends on how many pods a node already has (IPAM
reservations, port-mapping rules).  Each mode gets a separate node namespace with a bridge holding
the pods' gateway address -- portmap looks for the interface that routes to the pod, as it would
with a real bridge -- and is filled up to each level (populating is not timed), then probed with
one pod's ADD and DEL per sample, modes alternating.
"""

from __future__ import annotations

import concurrent.futures
import json
import os
import threading
from dataclasses import dataclass
from typing import Optional

from cnichain.benchmarks.latency.session import Bench, Mode
from cnichain.podstate.runtime import Attachment, Runtime

GROWTH_SUBNET = "10.200.0.0/16"
GROWTH_GATEWAY = "10.200.0.1"
GROWTH_NETWORK = "benchgrow"
BRIDGE = "benchgrow0"
POPULATE_PORT_BASE = 30000
PROBE_PORT_BASE = 29000
POPULATE_THREADS = 4


@dataclass
class Grower:
    """One mode's growth set-up: its own node, runtime, probe pod and IPAM directory."""

    mode: Mode
    runtime: Runtime
    pod: str
    ipam_dir: str
    portmap: Optional[str]  # "ours"/"reference", or None when the mode has no portmap
    portmap_backend: Optional[str] = None  # the reference portmap's "backend" key, as in the mode's chain
    present: int = 0


def run_growth(bench: Bench) -> None:
    levels = sorted(set(bench.o.growth))
    growers = [g for g in (_prepare(bench, mode) for mode in bench.modes.values()) if g is not None]
    if not growers:
        return
    for level in levels:
        for g in growers:
            _populate(bench, g, level)
        for s in range(bench.o.growth_samples):
            order = growers[::-1] if s % 2 else growers
            for g in order:
                _probe(bench, g, level, s)
            bench.progress(f"[growth] {level} pods present: sample {s + 1}/{bench.o.growth_samples}")
    bench.progress("[growth] done", final=True)


def _prepare(bench: Bench, mode: Mode) -> Optional[Grower]:
    have = {p: bench.which(mode, p) for p in ("host-local", "portmap")}
    if have["host-local"] is None:
        bench.notes.append(f"growth: {mode.name} has no host-local; skipped")
        return None
    if have["portmap"] is None:
        bench.notes.append(f"growth: {mode.name} has no portmap; host-local only")
    index = list(bench.modes).index(mode.name)
    node = bench.lab.netns(f"grow-{index}")
    bench.lab.run(node, "ip", "link", "add", BRIDGE, "type", "bridge")
    bench.lab.run(node, "ip", "addr", "add", f"{GROWTH_GATEWAY}/16", "dev", BRIDGE)
    bench.lab.run(node, "ip", "link", "set", BRIDGE, "up")
    pod = bench.lab.netns(f"gpod-{index}")
    runtime = Runtime(mode.bin_dirs, os.path.join(mode.workdir, "gcache"), node_netns=node,
                      on_exec=bench.recorder(mode), timeout=60, extra_env=mode.runtime.extra_env)
    for p in ("host-local", "portmap"):
        if source := have[p]:
            mode.provenance.setdefault(p, source)
    return Grower(mode, runtime, pod, os.path.join(mode.workdir, "grow-ipam"), have["portmap"],
                  mode.portmap_backend if have["portmap"] == "reference" else None)


def ipam_conf(g: Grower) -> dict:
    return {"cniVersion": "1.0.0", "name": GROWTH_NETWORK, "type": "bridge",
            "ipam": {"type": "host-local", "subnet": GROWTH_SUBNET, "gateway": GROWTH_GATEWAY,
                     "dataDir": g.ipam_dir}}


def portmap_conf(prev: dict, host_port: int, backend: Optional[str] = None) -> dict:
    conf = {"cniVersion": "1.0.0", "name": GROWTH_NETWORK, "type": "portmap", "snat": True,
            "runtimeConfig": {"portMappings": [{"hostPort": host_port, "containerPort": 80, "protocol": "tcp"}]},
            "prevResult": prev}
    if backend:
        conf["backend"] = backend
    return conf


def _one_pod(g: Grower, cid: str, host_port: int, command: str, prev: Optional[dict]) -> Optional[dict]:
    """ADD (host-local, then portmap with host-local's result) or DEL (the reverse) of one pod."""
    rt = g.runtime
    att = Attachment(cid, g.pod, "eth0")
    if command == "ADD":
        out = json.loads(rt.exec_plugin("host-local", "ADD", att, ipam_conf(g)))
        prev = {"cniVersion": "1.0.0", "interfaces": [{"name": "eth0", "sandbox": g.pod}],
                "ips": [dict(ip, interface=0) for ip in out.get("ips", [])]}
        if g.portmap:
            rt.exec_plugin("portmap", "ADD", att, portmap_conf(prev, host_port, g.portmap_backend))
        return prev
    if g.portmap:
        rt.exec_plugin("portmap", "DEL", att, portmap_conf(prev or {}, host_port, g.portmap_backend))
    rt.exec_plugin("host-local", "DEL", att, ipam_conf(g))
    return None


def _populate(bench: Bench, g: Grower, level: int) -> None:
    start = g.present
    if level <= start:
        return
    name = g.mode.name
    done = [0]
    lock = threading.Lock()

    def add(i: int) -> None:
        _, _, err = bench.collect(lambda: _one_pod(g, f"grow-{i}", POPULATE_PORT_BASE + i, "ADD", None))
        if err is not None:
            bench.error("growth", name, f"populate pod {i}", err)
        with lock:
            done[0] += 1
        bench.progress(f"[growth] {name}: populating {start + done[0]}/{level} pods")

    with concurrent.futures.ThreadPoolExecutor(max_workers=POPULATE_THREADS) as pool:
        list(pool.map(add, range(start, level)))
    g.present = level


def _probe(bench: Bench, g: Grower, level: int, s: int) -> None:
    cid = f"probe-{level}-{s}"
    port = PROBE_PORT_BASE + s
    prev, recs, err = bench.collect(lambda: _one_pod(g, cid, port, "ADD", None))
    bench.keep_outcome("growth", g.mode.name, f"probe ADD at {level}", recs, err, level)
    _, recs, err = bench.collect(lambda: _one_pod(g, cid, port, "DEL", prev))
    bench.keep_outcome("growth", g.mode.name, f"probe DEL at {level}", recs, err, level)
