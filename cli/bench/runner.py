"""``cnichain bench``: per-pod exec-to-exit latency of our plugins, side by side with the reference.

A node pays one plugin process per plugin per command per pod, so the number that matters is the
time from exec to exit, as the runtime sees it.  This module drives the plugins exactly as a
runtime does (through :class:`cnichain.cli.runtime.Runtime`: ADD in order with ``prevResult`` and
``runtimeConfig``, DEL in reverse with the cached result) inside throwaway namespaces, and times
every exec with the runner's ``on_exec`` hook.

Each implementation ("mode") gets its own node namespace, pod namespaces, IPAM directory and result
cache, so the two never see each other's bridges, rules or reservations; within one run the modes
are interleaved pod by pod (alternating which goes first) so machine noise hits both alike.

Phases:

``floor``     a bare interpreter start (``python -I -S -c pass``) and every plugin's VERSION exec:
              the cost no plugin work can go below.
``chain``     N pods through the whole conflist, one after another.
``parallel``  8 pods at once (ADD batch, then DEL batch): wall time per batch.
``growth``    host-local and portmap ADD/DEL with 0, 100, 1,000 other pods present.

The result is a JSON document (``summary``), a terminal table and, when matplotlib is installed,
a PNG chart of latency against pods present.  This module never imports typer; ``cnichain bench``
in :mod:`cnichain.cli.app` is a thin wrapper over :func:`main`.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import json
import os
import platform
import statistics
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Optional

from cnichain.cli.lab import Lab, isolate_conflist
from cnichain.cli.runtime import Attachment, ConfList, ExecRecord, PluginFailed, Runtime
from cnichain.common.invoke import find_plugin

DEFAULT_REFERENCE_DIR = "/usr/lib/cni"
DEFAULT_CONFLIST = "cnichain-default.conflist"
MODES = ("cold", "warm", "reference")
LABEL = {"cold": "ours", "warm": "warm", "reference": "ref"}
# Plugins the bench looks at for growth: the two whose work depends on how many pods a node has.
GROWTH_SUBNET = "10.200.0.0/16"
GROWTH_GATEWAY = "10.200.0.1"
GROWTH_NETWORK = "benchgrow"


# ---------------------------------------------------------------------------------------------
# options and samples
# ---------------------------------------------------------------------------------------------
@dataclass
class Options:
    pods: int = 20
    parallel: int = 8
    parallel_rounds: int = 3
    growth: tuple[int, ...] = (0, 100, 1000)
    growth_samples: int = 10
    floor_samples: int = 30
    modes: tuple[str, ...] = ("cold", "reference")
    reference_dir: str = DEFAULT_REFERENCE_DIR
    conflist: str = ""  # path; empty = the shipped default chain
    output_dir: str = "benchmarks/results"
    phases: tuple[str, ...] = ("floor", "chain", "parallel", "growth")
    fallback: bool = True  # ours missing a plugin -> use the reference one (reported as such)
    chart: bool = True
    quiet: bool = False


@dataclass
class Sample:
    mode: str
    phase: str
    plugin: str
    command: str
    seconds: float
    code: int
    present: int = 0  # other pods present (growth phase)
    impl: str = ""  # "ours" or "reference": which binary actually ran


@dataclass
class Mode:
    """One implementation under test, isolated in its own node namespace."""

    name: str
    bin_dirs: list[str]
    node: str
    workdir: str
    runtime: Runtime
    conflist: Optional[ConfList] = None
    provenance: dict[str, str] = field(default_factory=dict)  # plugin type -> "ours"/"reference"
    skipped: dict[str, str] = field(default_factory=dict)  # plugin type -> why it is left out
    pods: list[str] = field(default_factory=list)


class Progress:
    """One status line on stderr, rewritten in place on a terminal."""

    def __init__(self, quiet: bool) -> None:
        self.quiet = quiet
        self.tty = sys.stderr.isatty()
        self._last = 0.0

    def __call__(self, text: str, final: bool = False) -> None:
        if self.quiet:
            return
        now = time.monotonic()
        if self.tty:
            sys.stderr.write("\r\033[K" + text + ("\n" if final else ""))
            sys.stderr.flush()
        elif final or now - self._last > 2.0:
            sys.stderr.write(text + "\n")
            sys.stderr.flush()
            self._last = now


# ---------------------------------------------------------------------------------------------
# the bench
# ---------------------------------------------------------------------------------------------
class Bench:
    def __init__(self, options: Options, lab: Lab, progress: Optional[Callable[..., None]] = None) -> None:
        self.o = options
        self.lab = lab
        self.progress = progress or Progress(options.quiet)
        self.samples: list[Sample] = []
        self.notes: list[str] = []
        self.parallel: list[dict] = []
        self.chain_totals: list[dict] = []
        self.errors: list[dict] = []
        self._sink = threading.local()
        self._lock = threading.Lock()
        self.modes: dict[str, Mode] = {}
        self.our_bin = os.path.join(lab.workdir, "bin")
        self.cleanup: list[Any] = []  # context managers to exit when the bench ends (the agent)

    # -- set-up ----------------------------------------------------------------------------------
    def setup(self) -> None:
        from cnichain.cli import install as installer

        report = installer.install(self.our_bin)
        ours = sorted(os.path.basename(p) for p in report.written + report.unchanged)
        missing = sorted(set(installer.PLUGINS) - set(ours))
        if missing:
            self.notes.append(f"not yet implemented by cnichain: {', '.join(missing)}")
        ref_ok = os.path.isfile(os.path.join(self.o.reference_dir, "bridge"))
        for name in self.o.modes:
            if name == "reference":
                if not ref_ok:
                    self.notes.append(f"reference skipped: no reference plugins in {self.o.reference_dir}")
                    continue
                dirs = [self.o.reference_dir]
            elif name == "warm":
                why = warm_unavailable()
                if why:
                    self.notes.append(f"warm skipped: {why}")
                    continue
                dirs = [self.our_bin] + ([self.o.reference_dir] if self.o.fallback and ref_ok else [])
            else:
                dirs = [self.our_bin] + ([self.o.reference_dir] if self.o.fallback and ref_ok else [])
            self.modes[name] = self._make_mode(name, dirs)
        if "warm" in self.modes:
            start_warm_agent(self, self.modes["warm"])
        base = self._load_conflist()
        for mode in self.modes.values():
            mode.conflist = self._chain_for(mode, base)

    def _make_mode(self, name: str, dirs: list[str]) -> Mode:
        node = self.lab.netns(f"node-{name}")
        workdir = os.path.join(self.lab.workdir, name)
        os.makedirs(workdir, mode=0o700, exist_ok=True)
        mode = Mode(name, dirs, node, workdir, runtime=None)  # type: ignore[arg-type]
        mode.runtime = Runtime(dirs, os.path.join(workdir, "cache"), node_netns=node, on_exec=self._recorder(mode),
                               timeout=60, extra_env=self._mode_env(name))
        return mode

    @staticmethod
    def _mode_env(name: str) -> dict[str, str]:
        # cold: never forward to an agent, even one running on the machine; warm: set at start.
        return {"CNICHAIN_AGENT_SOCKET": "off"} if name == "cold" else {}

    def _recorder(self, mode: Mode) -> Callable[[ExecRecord], None]:
        def record(rec: ExecRecord) -> None:
            sink = getattr(self._sink, "records", None)
            if sink is not None:
                sink.append((mode.name, rec))

        return record

    def _load_conflist(self) -> dict:
        path = self.o.conflist
        if not path:
            from cnichain.cli.install import conflists_dir

            path = os.path.join(conflists_dir(), DEFAULT_CONFLIST)
        with open(path, "rb") as fh:
            data = json.loads(fh.read())
        ConfList.from_dict(data, path)  # refuse a broken list early
        return data

    def _chain_for(self, mode: Mode, base: dict) -> ConfList:
        data = isolate_conflist(base, mode.workdir)
        kept = []
        for plugin in ConfList.from_dict(data).plugins:
            ptype = plugin["type"]
            where = self._which(mode, ptype)
            if where is None:
                mode.skipped[ptype] = "no such plugin" if mode.name != "reference" else "the reference has no such plugin"
                continue
            mode.provenance[ptype] = where
            ipam = plugin.get("ipam")
            if isinstance(ipam, dict) and ipam.get("type"):
                ipam_where = self._which(mode, str(ipam["type"]))
                if ipam_where:
                    mode.provenance[str(ipam["type"])] = ipam_where
            kept.append(plugin)
        data["plugins"] = kept
        return ConfList.from_dict(data)

    def _which(self, mode: Mode, ptype: str) -> Optional[str]:
        try:
            path = find_plugin(ptype, mode.bin_dirs)
        except Exception:  # noqa: BLE001 - not found
            return None
        return "ours" if os.path.dirname(path) == self.our_bin else "reference"

    # -- measuring -------------------------------------------------------------------------------
    def _collect(self, fn: Callable[[], Any]) -> tuple[Any, list[tuple[str, ExecRecord]], Optional[BaseException]]:
        self._sink.records = []
        try:
            out = fn()
            err = None
        except (PluginFailed, OSError, ValueError) as exc:
            out, err = None, exc
        finally:
            recs = self._sink.records
            self._sink.records = None
        return out, recs, err

    def _keep(self, phase: str, recs: list[tuple[str, ExecRecord]], present: int = 0) -> None:
        with self._lock:
            for mode_name, rec in recs:
                mode = self.modes[mode_name]
                self.samples.append(
                    Sample(mode_name, phase, rec.plugin, rec.command, rec.seconds, rec.code, present,
                           mode.provenance.get(rec.plugin, "ours" if mode_name != "reference" else "reference"))
                )

    def _error(self, phase: str, mode: str, what: str, exc: BaseException) -> None:
        with self._lock:
            self.errors.append({"phase": phase, "mode": mode, "what": what, "error": str(exc)})

    def _ordered(self, i: int) -> list[Mode]:
        modes = list(self.modes.values())
        return modes if i % 2 == 0 else modes[::-1]

    # -- phase: floor ------------------------------------------------------------------------------
    def phase_floor(self) -> None:
        python = sys.executable
        plugin_types = sorted({p for m in self.modes.values() for p in m.provenance})
        for i in range(self.o.floor_samples):
            self.progress(f"[floor] {i + 1}/{self.o.floor_samples}")
            started = time.perf_counter()
            subprocess.run([python, "-I", "-S", "-c", "pass"], check=False)
            self.samples.append(Sample("python", "floor", "python -I -S -c pass", "START", time.perf_counter() - started, 0))
            for mode in self._ordered(i):
                for ptype in plugin_types:
                    if mode.provenance.get(ptype) is None:
                        continue
                    _, recs, err = self._collect(lambda: mode.runtime.version(ptype))
                    if err is not None:
                        self._error("floor", mode.name, f"{ptype} VERSION", err)
                    self._keep("floor", recs)
        self.progress("[floor] done", final=True)

    # -- phase: chain ------------------------------------------------------------------------------
    def _attachment(self, mode: Mode, i: int, pod: str) -> Attachment:
        return Attachment(
            f"bench-{mode.name}-{i}",
            pod,
            "eth0",
            [("IgnoreUnknown", "1"), ("K8S_POD_NAMESPACE", "bench"), ("K8S_POD_NAME", f"pod-{i}")],
            {
                "portMappings": [{"hostPort": 20000 + i, "containerPort": 80, "protocol": "tcp"}],
                "bandwidth": {"ingressRate": 100_000_000, "ingressBurst": 10_000_000,
                              "egressRate": 100_000_000, "egressBurst": 10_000_000},
            },
        )

    def _pod(self, mode: Mode, i: int) -> str:
        while len(mode.pods) <= i:
            mode.pods.append(self.lab.netns(f"{mode.name[:3]}{len(mode.pods)}"))
        return mode.pods[i]

    def phase_chain(self) -> None:
        n = self.o.pods
        live: dict[str, list[int]] = {m: [] for m in self.modes}
        for i in range(n):
            for mode in self._ordered(i):
                att = self._attachment(mode, i, self._pod(mode, i))
                _, recs, err = self._collect(lambda: mode.runtime.add(mode.conflist, att))
                self._keep("chain", recs)
                self._total(mode.name, i, "ADD", recs, err)
                if err is not None:
                    self._error("chain", mode.name, f"pod {i} ADD", err)
                live[mode.name].append(i)
            self.progress(f"[chain] ADD pod {i + 1}/{n}  " + self._last_totals("ADD"))
        for k, i in enumerate(reversed(range(n))):
            for mode in self._ordered(k):
                if i not in live[mode.name]:
                    continue
                att = Attachment(f"bench-{mode.name}-{i}", mode.pods[i], "eth0",
                                 [("IgnoreUnknown", "1"), ("K8S_POD_NAMESPACE", "bench"), ("K8S_POD_NAME", f"pod-{i}")])
                _, recs, err = self._collect(lambda: mode.runtime.delete(mode.conflist, att))
                self._keep("chain", recs)
                self._total(mode.name, i, "DEL", recs, err)
                if err is not None:
                    self._error("chain", mode.name, f"pod {i} DEL", err)
            self.progress(f"[chain] DEL pod {k + 1}/{n}  " + self._last_totals("DEL"))
        self.progress(f"[chain] done: {n} pods", final=True)

    def _total(self, mode: str, pod: int, command: str, recs: list[tuple[str, ExecRecord]], err: Optional[BaseException]) -> None:
        per = {rec.plugin: rec.seconds for _, rec in recs}
        self.chain_totals.append({"mode": mode, "pod": pod, "command": command, "ok": err is None,
                                  "seconds": sum(per.values()), "plugins": per})

    def _last_totals(self, command: str) -> str:
        parts = []
        for name in self.modes:
            last = [t for t in self.chain_totals if t["mode"] == name and t["command"] == command]
            if last:
                parts.append(f"{name} {last[-1]['seconds'] * 1000:.0f} ms")
        return "  ".join(parts)

    # -- phase: parallel ---------------------------------------------------------------------------
    def phase_parallel(self) -> None:
        width = self.o.parallel
        base = 1000  # pod numbers distinct from the chain phase
        for r in range(self.o.parallel_rounds):
            for mode in self._ordered(r):
                for command in ("ADD", "DEL"):
                    atts = [self._attachment(mode, base + j, self._pod(mode, j)) for j in range(width)]
                    if command == "DEL":
                        for a in atts:
                            a.capability_args = {}  # the runtime resends them from its cache

                    def one(att: Attachment) -> tuple[list, Optional[BaseException]]:
                        op = mode.runtime.add if command == "ADD" else mode.runtime.delete
                        _, recs, err = self._collect(lambda: op(mode.conflist, att))
                        return recs, err

                    started = time.perf_counter()
                    with concurrent.futures.ThreadPoolExecutor(max_workers=width) as pool:
                        outcomes = list(pool.map(one, atts))
                    wall = time.perf_counter() - started
                    failed = 0
                    for recs, err in outcomes:
                        self._keep("parallel", recs)
                        if err is not None:
                            failed += 1
                            self._error("parallel", mode.name, f"round {r} {command}", err)
                    self.parallel.append({"mode": mode.name, "round": r, "command": command, "pods": width,
                                          "wall_seconds": wall, "failed": failed})
                    self.progress(f"[parallel] round {r + 1}/{self.o.parallel_rounds} {mode.name} {command} x{width}: {wall * 1000:.0f} ms")
        self.progress("[parallel] done", final=True)

    # -- phase: growth -----------------------------------------------------------------------------
    def phase_growth(self) -> None:
        levels = sorted(set(self.o.growth))
        grow_modes: dict[str, dict] = {}
        for mode in self.modes.values():
            have = {p: self._which(mode, p) for p in ("host-local", "portmap")}
            if have["host-local"] is None:
                self.notes.append(f"growth: {mode.name} has no host-local; skipped")
                continue
            if have["portmap"] is None:
                self.notes.append(f"growth: {mode.name} has no portmap; host-local only")
            node = self.lab.netns(f"grow-{mode.name}")
            # An address on the node for the pods' subnet, so portmap finds the interface that
            # routes to the pods (it sets route_localnet there) just as it would with a bridge.
            self.lab.run(node, "ip", "link", "add", "benchgrow0", "type", "bridge")
            self.lab.run(node, "ip", "addr", "add", f"{GROWTH_GATEWAY}/16", "dev", "benchgrow0")
            self.lab.run(node, "ip", "link", "set", "benchgrow0", "up")
            pod = self.lab.netns(f"gpod-{mode.name}")
            runtime = Runtime(mode.bin_dirs, os.path.join(mode.workdir, "gcache"), node_netns=node,
                              on_exec=self._recorder(mode), timeout=60, extra_env=mode.runtime.extra_env)
            grow_modes[mode.name] = {"mode": mode, "runtime": runtime, "pod": pod, "present": 0,
                                     "ipam_dir": os.path.join(mode.workdir, "grow-ipam"), "portmap": have["portmap"]}
            for p in ("host-local", "portmap"):
                if have[p]:
                    mode.provenance.setdefault(p, have[p])
        if not grow_modes:
            return
        for level in levels:
            for g in grow_modes.values():
                self._populate(g, level)
            for s in range(self.o.growth_samples):
                order = list(grow_modes.values())
                if s % 2:
                    order.reverse()
                for g in order:
                    self._probe(g, level, s)
                self.progress(f"[growth] {level} pods present: sample {s + 1}/{self.o.growth_samples}")
        self.progress("[growth] done", final=True)

    def _ipam_conf(self, g: dict) -> dict:
        return {"cniVersion": "1.0.0", "name": GROWTH_NETWORK, "type": "bridge",
                "ipam": {"type": "host-local", "subnet": GROWTH_SUBNET, "gateway": GROWTH_GATEWAY,
                         "dataDir": g["ipam_dir"]}}

    def _portmap_conf(self, g: dict, prev: dict, host_port: int) -> dict:
        return {"cniVersion": "1.0.0", "name": GROWTH_NETWORK, "type": "portmap", "snat": True,
                "runtimeConfig": {"portMappings": [{"hostPort": host_port, "containerPort": 80, "protocol": "tcp"}]},
                "prevResult": prev}

    def _one_pod(self, g: dict, cid: str, host_port: int, command: str, prev: Optional[dict]) -> Optional[dict]:
        rt: Runtime = g["runtime"]
        att = Attachment(cid, g["pod"], "eth0")
        if command == "ADD":
            out = json.loads(rt.exec_plugin("host-local", "ADD", att, self._ipam_conf(g)))
            prev = {"cniVersion": "1.0.0", "interfaces": [{"name": "eth0", "sandbox": g["pod"]}],
                    "ips": [dict(ip, interface=0) for ip in out.get("ips", [])]}
            if g["portmap"]:
                rt.exec_plugin("portmap", "ADD", att, self._portmap_conf(g, prev, host_port))
            return prev
        if g["portmap"]:
            rt.exec_plugin("portmap", "DEL", att, self._portmap_conf(g, prev or {}, host_port))
        rt.exec_plugin("host-local", "DEL", att, self._ipam_conf(g))
        return None

    def _populate(self, g: dict, level: int) -> None:
        start = g["present"]
        if level <= start:
            return
        name = g["mode"].name
        done = [0]

        def add(i: int) -> None:
            _, _, err = self._collect(lambda: self._one_pod(g, f"grow-{i}", 30000 + i, "ADD", None))
            if err is not None:
                self._error("growth", name, f"populate pod {i}", err)
            with self._lock:
                done[0] += 1
            self.progress(f"[growth] {name}: populating {start + done[0]}/{level} pods")

        with concurrent.futures.ThreadPoolExecutor(max_workers=4) as pool:
            list(pool.map(add, range(start, level)))
        g["present"] = level

    def _probe(self, g: dict, level: int, s: int) -> None:
        cid = f"probe-{level}-{s}"
        prev, recs, err = self._collect(lambda: self._one_pod(g, cid, 29000 + s, "ADD", None))
        self._keep("growth", recs, level)
        if err is not None:
            self._error("growth", g["mode"].name, f"probe ADD at {level}", err)
        _, recs, err = self._collect(lambda: self._one_pod(g, cid, 29000 + s, "DEL", prev))
        self._keep("growth", recs, level)
        if err is not None:
            self._error("growth", g["mode"].name, f"probe DEL at {level}", err)

# ---------------------------------------------------------------------------------------------
# the warm mode hook (issue 8: the node agent)
# ---------------------------------------------------------------------------------------------
def warm_unavailable() -> str:
    """Why the warm mode cannot run here ("" when it can)."""
    try:
        from cnichain.cli import agent
    except ImportError:
        return "the node agent (cnichain.cli.agent) is not available"
    if not hasattr(agent, "running_agent"):
        return "cnichain.cli.agent has no running_agent() entry point"
    return ""


def start_warm_agent(bench: Bench, mode: Mode) -> None:
    """Start the node agent for ``mode`` inside its node namespace; point that mode's shims at it.

    Uses ``cnichain.cli.agent.running_agent(socket_path, netns=...)`` (issue 8).  The launchers'
    shim forwards to the socket named by ``CNICHAIN_AGENT_SOCKET``; the cold mode sets it to
    ``off`` so an agent running on the machine can never leak into the cold numbers.
    """
    from cnichain.cli import agent

    socket_path = os.path.join(mode.workdir, "agent.sock")
    ctx = agent.running_agent(socket_path, netns=mode.node)
    ctx.__enter__()
    bench.cleanup.append(ctx)
    mode.runtime.extra_env["CNICHAIN_AGENT_SOCKET"] = socket_path


# ---------------------------------------------------------------------------------------------
# statistics and reports
# ---------------------------------------------------------------------------------------------
def pct(values: list[float], q: float) -> float:
    """Nearest-rank percentile (q in 0..100) of a non-empty list."""
    s = sorted(values)
    k = max(0, min(len(s) - 1, int(round(q / 100.0 * len(s) + 0.5)) - 1))
    return s[k]


def stats(values: list[float]) -> dict:
    if not values:
        return {"n": 0}
    return {"n": len(values), "median_ms": statistics.median(values) * 1000, "p95_ms": pct(values, 95) * 1000,
            "min_ms": min(values) * 1000, "max_ms": max(values) * 1000}


def ratio(ours: Optional[float], ref: Optional[float]) -> Optional[float]:
    if ours is None or not ref:
        return None
    return ours / ref


def _median(d: dict) -> Optional[float]:
    return d.get("median_ms") if d else None


def summarize(bench: Bench, elapsed: float) -> dict:
    samples = [s for s in bench.samples if s.code == 0]
    modes = list(bench.modes)
    ours_mode = "cold" if "cold" in modes else (modes[0] if modes and modes[0] != "reference" else None)

    def pick(**kw: Any) -> list[float]:
        return [s.seconds for s in samples if all(getattr(s, k) == v for k, v in kw.items())]

    floor = stats(pick(phase="floor", mode="python"))
    out: dict[str, Any] = {
        "schema": "cnichain-bench/1",
        "when": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "machine": {"cpus": os.cpu_count(), "kernel": platform.release(), "python": platform.python_version(),
                    "loadavg_start_end": getattr(bench, "loadavg", None)},
        "options": {k: (list(v) if isinstance(v, tuple) else v) for k, v in vars(bench.o).items()},
        "elapsed_seconds": elapsed,
        "modes": {m.name: {"bin_dirs": m.bin_dirs, "plugins": m.provenance, "skipped": m.skipped} for m in bench.modes.values()},
        "floor": floor,
        "notes": list(bench.notes),
        "errors": bench.errors,
    }
    # VERSION execs: pure start-up cost per plugin.
    version = {}
    for m in modes:
        for ptype in sorted(bench.modes[m].provenance):
            st = stats(pick(phase="floor", mode=m, plugin=ptype, command="VERSION"))
            if st["n"]:
                version.setdefault(ptype, {})[m] = st
    out["version"] = version
    # Per plugin and command in the chain.
    per: dict[str, dict] = {}
    for s in samples:
        if s.phase == "chain":
            per.setdefault(s.plugin, {}).setdefault(s.command, {}).setdefault(s.mode, []).append(s.seconds)
    out["chain"] = {
        p: {c: {m: dict(stats(v), impl=bench.modes[m].provenance.get(p, "")) for m, v in cm.items()} for c, cm in pc.items()}
        for p, pc in per.items()
    }
    for p, pc in out["chain"].items():
        for c, cm in pc.items():
            if ours_mode in cm and "reference" in cm:
                cm["ratio"] = ratio(_median(cm[ours_mode]), _median(cm["reference"]))
    # Chain totals per pod (all plugins of the mode's chain; and like-for-like with the reference).
    ref_types = set(bench.modes["reference"].provenance) if "reference" in bench.modes else set()
    totals: dict[str, dict] = {}
    for m in modes:
        rows = [t for t in bench.chain_totals if t["mode"] == m and t["ok"]]
        per_pod: dict[int, dict[str, float]] = {}
        like: dict[int, dict[str, float]] = {}
        for t in rows:
            per_pod.setdefault(t["pod"], {})[t["command"]] = t["seconds"]
            like.setdefault(t["pod"], {})[t["command"]] = sum(v for k, v in t["plugins"].items() if not ref_types or k in ref_types)
        entry = {}
        for key, table in (("all", per_pod), ("like_for_like", like)):
            entry[key] = {
                "ADD": stats([v["ADD"] for v in table.values() if "ADD" in v]),
                "DEL": stats([v["DEL"] for v in table.values() if "DEL" in v]),
                "ADD+DEL": stats([v["ADD"] + v["DEL"] for v in table.values() if "ADD" in v and "DEL" in v]),
            }
        totals[m] = entry
    if ours_mode in totals and "reference" in totals:
        totals["ratio"] = {c: ratio(_median(totals[ours_mode]["like_for_like"][c]), _median(totals["reference"]["all"][c]))
                           for c in ("ADD", "DEL", "ADD+DEL")}
    if "warm" in totals and "reference" in totals:
        totals["ratio_warm"] = {c: ratio(_median(totals["warm"]["like_for_like"][c]), _median(totals["reference"]["all"][c]))
                                for c in ("ADD", "DEL", "ADD+DEL")}
    out["chain_totals"] = totals
    # Parallel batches.
    par: dict[str, dict] = {}
    for row in bench.parallel:
        if not row["failed"]:
            par.setdefault(row["mode"], {}).setdefault(row["command"], []).append(row["wall_seconds"])
    out["parallel"] = {m: {c: stats(v) for c, v in cm.items()} for m, cm in par.items()}
    if ours_mode in par and "reference" in par:
        out["parallel"]["ratio"] = {c: ratio(_median(out["parallel"][ours_mode].get(c, {})), _median(out["parallel"]["reference"].get(c, {})))
                                    for c in ("ADD", "DEL")}
    out["parallel_pods"] = bench.o.parallel
    # Growth.
    growth: dict[str, dict] = {}
    for s in samples:
        if s.phase == "growth":
            growth.setdefault(s.plugin, {}).setdefault(s.command, {}).setdefault(str(s.present), {}).setdefault(s.mode, []).append(s.seconds)
    out["growth"] = {
        p: {c: {lvl: {m: dict(stats(v), impl=bench.modes[m].provenance.get(p, "")) for m, v in mv.items()}
                for lvl, mv in lv.items()} for c, lv in pc.items()}
        for p, pc in growth.items()
    }
    for p, pc in out["growth"].items():
        for c, lv in pc.items():
            for lvl, mv in lv.items():
                if ours_mode in mv and "reference" in mv:
                    mv["ratio"] = ratio(_median(mv[ours_mode]), _median(mv["reference"]))
    out["targets"] = targets(out, ours_mode)
    return out


def targets(out: dict, ours: Optional[str]) -> list[dict]:
    """The issue's acceptance targets, each with the measured value and whether it is met."""
    rows: list[dict] = []
    if not ours:
        return rows
    floor = _median(out.get("floor", {}))

    def add(name: str, value: Optional[float], limit: float, unit: str) -> None:
        rows.append({"target": name, "value": value, "limit": limit, "unit": unit,
                     "met": None if value is None else value <= limit})

    g = out.get("growth", {})
    levels = sorted({int(lvl) for pc in g.values() for lv in pc.values() for lvl in lv})
    def real(cells: dict) -> bool:
        return (cells.get(ours) or {}).get("impl") == "ours"

    for c in ("ADD", "DEL"):
        lv = {k: v for k, v in g.get("portmap", {}).get(c, {}).items() if real(v)}
        if "0" in lv:
            add(f"portmap {c} median, 0 pods: ours/reference", lv["0"].get("ratio"), 1.0, "x")
        top = str(max(levels)) if levels else None
        if top and top != "0" and top in lv:
            add(f"portmap {c} median, {top} pods: ours/reference", lv[top].get("ratio"), 0.5, "x")
    for c in ("ADD", "DEL"):
        lv = {k: v for k, v in g.get("host-local", {}).get(c, {}).items() if real(v)}
        if "0" in lv and floor:
            add(f"host-local {c} median, 0 pods: ours/python floor", ratio(_median(lv["0"].get(ours, {})), floor), 2.5, "x")
        tun = out.get("chain", {}).get("tuning", {}).get(c, {})
        if ours in tun and floor and tun[ours].get("impl") == "ours":
            add(f"tuning (sysctls only) {c} median: ours/python floor", ratio(_median(tun[ours]), floor), 2.5, "x")
    r = out.get("chain_totals", {}).get("ratio", {})
    if r:
        add("chain ADD+DEL per pod median: ours/reference (like for like)", r.get("ADD+DEL"), 4.0, "x")
    return rows


def _ms(v: Optional[float]) -> str:
    return "-" if v is None else (f"{v:.1f}" if v < 100 else f"{v:.0f}")


def _x(v: Optional[float]) -> str:
    return "-" if v is None else f"{v:.2f}x"


def render_table(out: dict) -> str:
    """The summary as plain-text tables for a terminal."""
    lines: list[str] = []
    modes = [m for m in out.get("modes", {})]
    ours = "cold" if "cold" in modes else None
    ref = "reference" if "reference" in modes else None
    floor = out.get("floor", {})
    lines.append(f"cnichain bench  {out['when']}  cpus={out['machine']['cpus']}  kernel={out['machine']['kernel']}  "
                 f"python={out['machine']['python']}")
    if floor.get("n"):
        lines.append(f"interpreter floor (python -I -S -c pass): median {_ms(floor['median_ms'])} ms  p95 {_ms(floor['p95_ms'])} ms")
    for m, info in out.get("modes", {}).items():
        fall = [p for p, w in info["plugins"].items() if w == "reference" and m != "reference"]
        lines.append(f"mode {m}: {', '.join(sorted(info['plugins']))}"
                     + (f"  (reference fallback: {', '.join(fall)})" if fall else "")
                     + (f"  (left out: {', '.join(info['skipped'])})" if info["skipped"] else ""))
    cols = [m for m in (ours, ref, "warm") if m and m in modes]

    def header(title: str, first: str) -> None:
        lines.append("")
        lines.append(title)
        head = f"  {first:<28}" + "".join(f"{LABEL[m] + ' med':>12}{LABEL[m] + ' p95':>12}" for m in cols)
        head += "  ours/ref" if ours and ref else ""
        lines.append(head)

    def row(label: str, cells: dict, r: Optional[float]) -> None:
        text = f"  {label:<28}"
        for m in cols:
            st = cells.get(m) or {}
            text += f"{_ms(st.get('median_ms')):>12}{_ms(st.get('p95_ms')):>12}"
        if ours and ref:
            text += f"{_x(r):>10}"
        lines.append(text)

    if out.get("version"):
        header("VERSION exec (ms): start-up cost only", "plugin")
        for p, cells in sorted(out["version"].items()):
            row(p, cells, ratio(_median(cells.get(ours or "", {})), _median(cells.get(ref or "", {}))))
    if out.get("chain"):
        header("chain, per plugin and command (ms, exec to exit; bridge includes its host-local exec)", "plugin command")
        order = ["bridge", "portmap", "bandwidth", "tuning", "route-override"]
        for p in sorted(out["chain"], key=lambda x: (order.index(x) if x in order else 99, x)):
            for c in ("ADD", "DEL", "CHECK"):
                cells = out["chain"][p].get(c)
                if cells:
                    label = f"{p} {c}"
                    impl = (cells.get(ours or "") or {}).get("impl")
                    if impl == "reference":
                        label += " [ref binary]"
                    row(label, cells, cells.get("ratio"))
    tot = out.get("chain_totals", {})
    if tot:
        header("chain totals per pod (ms); ours like-for-like = without plugins the reference lacks", "")
        for c in ("ADD", "DEL", "ADD+DEL"):
            cells = {m: tot[m]["like_for_like" if m != "reference" else "all"][c] for m in cols if m in tot}
            row(f"{c} (like for like)", cells, tot.get("ratio", {}).get(c))
            if "ratio_warm" in tot:
                lines.append(f"  {c + ' warm/ref':<28}{_x(tot['ratio_warm'].get(c)):>12}")
            if ours in tot:
                lines.append(f"  {c + ' (ours, whole chain)':<28}{_ms(tot[ours]['all'][c].get('median_ms')):>12}"
                             f"{_ms(tot[ours]['all'][c].get('p95_ms')):>12}")
    par = out.get("parallel", {})
    if any(m in par for m in cols):
        header(f"{out.get('parallel_pods')} pods in parallel: wall time per batch (ms)", "batch")
        for c in ("ADD", "DEL"):
            row(f"{c} x{out.get('parallel_pods')}", {m: par.get(m, {}).get(c) for m in cols}, par.get("ratio", {}).get(c))
    g = out.get("growth", {})
    if g:
        header("growth: latency with N other pods present (ms)", "plugin command @pods")
        for p in ("host-local", "portmap"):
            for c in ("ADD", "DEL"):
                for lvl, cells in sorted(g.get(p, {}).get(c, {}).items(), key=lambda kv: int(kv[0])):
                    fallback = (cells.get(ours or "") or {}).get("impl") == "reference"
                    row(f"{p} {c} @{lvl}" + (" [ref binary]" if fallback else ""), cells, cells.get("ratio"))
    if out.get("targets"):
        lines.append("")
        lines.append("targets")
        for t in out["targets"]:
            verdict = "n/a" if t["met"] is None else ("met" if t["met"] else "MISSED")
            lines.append(f"  {t['target']:<62} {_x(t['value']):>8}  (<= {t['limit']}x)  {verdict}")
    for n in out.get("notes", []):
        lines.append(f"note: {n}")
    if out.get("errors"):
        lines.append(f"errors: {len(out['errors'])} (first: {out['errors'][0]['mode']} {out['errors'][0]['what']}: {out['errors'][0]['error'][:200]})")
    return "\n".join(lines)


def write_chart(out: dict, path: str) -> Optional[str]:
    """A PNG of growth latency against pods present; returns why it was skipped, or None."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return "matplotlib is not installed (pip install 'cnichain[bench]')"
    g = out.get("growth", {})
    if not g:
        return "no growth data"
    fig, axes = plt.subplots(1, 2, figsize=(11, 4.2))
    styles = {"cold": "-", "reference": "--", "warm": ":"}
    for ax, plugin in zip(axes, ("host-local", "portmap")):
        for c, color in (("ADD", "tab:blue"), ("DEL", "tab:orange")):
            lv = g.get(plugin, {}).get(c, {})
            for m in ("cold", "warm", "reference"):
                pts = sorted((int(k), v[m]["median_ms"]) for k, v in lv.items() if m in v and v[m].get("n"))
                if pts:
                    ax.plot([p[0] for p in pts], [p[1] for p in pts], styles[m], marker="o", color=color,
                            label=f"{c} {'cnichain' if m == 'cold' else m}")
        floor = out.get("floor", {}).get("median_ms")
        if floor:
            ax.axhline(floor, color="grey", linewidth=0.8, label="python -I -S floor")
        levels = sorted({int(k) for c in ("ADD", "DEL") for k in g.get(plugin, {}).get(c, {})})
        ax.set_xscale("symlog", linthresh=10)
        if levels:
            ax.set_xlim(0, max(levels) * 1.3 + 1)
            ax.set_xticks(levels)
            ax.set_xticklabels([str(v) for v in levels])
        ax.set_xlabel("other pods present")
        ax.set_ylabel("median exec-to-exit (ms)")
        ax.set_title(plugin)
        ax.set_ylim(bottom=0)
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize=8)
    fig.suptitle(f"cnichain vs reference, {out['when']}")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return None


# ---------------------------------------------------------------------------------------------
# entry points
# ---------------------------------------------------------------------------------------------
def run_bench(options: Options) -> tuple[dict, dict[str, str]]:
    """Run the bench in a throwaway lab; return the summary and the files written."""
    if os.geteuid() != 0:
        raise SystemExit("cnichain bench needs root: it creates network namespaces")
    files: dict[str, str] = {}
    load0 = os.getloadavg()
    with Lab(prefix="cnib") as lab:
        bench = Bench(options, lab)
        try:
            bench.setup()
            started = time.time()
            for phase in ("floor", "chain", "parallel", "growth"):
                if phase in options.phases:
                    getattr(bench, f"phase_{phase}")()
            bench.loadavg = [load0, os.getloadavg()]  # type: ignore[attr-defined]
            out = summarize(bench, time.time() - started)
            out["run_id"] = lab.run_id
        finally:
            for ctx in bench.cleanup:
                ctx.__exit__(None, None, None)
    os.makedirs(options.output_dir, exist_ok=True)
    stamp = time.strftime("%Y%m%d-%H%M%S")
    files["json"] = os.path.join(options.output_dir, f"bench-{stamp}.json")
    with open(files["json"], "w") as fh:
        json.dump(out, fh, indent=2, sort_keys=True)
    files["table"] = os.path.join(options.output_dir, f"bench-{stamp}.txt")
    with open(files["table"], "w") as fh:
        fh.write(render_table(out) + "\n")
    if options.chart:
        png = os.path.join(options.output_dir, f"bench-{stamp}.png")
        why = write_chart(out, png)
        if why:
            out["notes"].append(f"chart skipped: {why}")
        else:
            files["png"] = png
    return out, files


def parse_args(argv: Optional[list[str]] = None) -> Options:
    p = argparse.ArgumentParser(prog="cnichain bench", description=__doc__.split("\n\n")[0])
    p.add_argument("--pods", type=int, default=Options.pods, help="pods through the whole chain, one after another")
    p.add_argument("--parallel", type=int, default=Options.parallel, help="pods per parallel batch (0 = skip)")
    p.add_argument("--parallel-rounds", type=int, default=Options.parallel_rounds)
    p.add_argument("--growth", default="0,100,1000", help="pods present for the growth phase, comma-separated ('' = skip)")
    p.add_argument("--growth-samples", type=int, default=Options.growth_samples)
    p.add_argument("--floor-samples", type=int, default=Options.floor_samples)
    p.add_argument("--modes", default="cold,reference", help="comma-separated subset of cold,warm,reference")
    p.add_argument("--reference-dir", default=DEFAULT_REFERENCE_DIR)
    p.add_argument("--conflist", default="", help="conflist to run (default: the shipped default chain)")
    p.add_argument("--output-dir", default=Options.output_dir)
    p.add_argument("--phases", default="floor,chain,parallel,growth")
    p.add_argument("--no-fallback", action="store_true", help="do not stand in reference plugins for ones cnichain lacks")
    p.add_argument("--no-chart", action="store_true")
    p.add_argument("--quiet", action="store_true")
    a = p.parse_args(argv)
    return options_from(a.pods, a.parallel, a.parallel_rounds, a.growth, a.growth_samples, a.floor_samples, a.modes,
                        a.reference_dir, a.conflist, a.output_dir, a.phases, not a.no_fallback, not a.no_chart, a.quiet)


def options_from(pods: int, parallel: int, parallel_rounds: int, growth: str, growth_samples: int, floor_samples: int,
                 modes: str, reference_dir: str, conflist: str, output_dir: str, phases: str, fallback: bool,
                 chart: bool, quiet: bool) -> Options:
    mode_list = tuple(m.strip() for m in modes.split(",") if m.strip())
    bad = [m for m in mode_list if m not in MODES]
    if bad:
        raise ValueError(f"unknown mode(s) {', '.join(bad)}; expected some of {', '.join(MODES)}")
    phase_list = tuple(x.strip() for x in phases.split(",") if x.strip())
    bad = [x for x in phase_list if x not in Options.phases]
    if bad:
        raise ValueError(f"unknown phase(s) {', '.join(bad)}; expected some of {', '.join(Options.phases)}")
    levels = tuple(int(x) for x in growth.split(",") if x.strip())
    if parallel <= 0:
        phase_list = tuple(x for x in phase_list if x != "parallel")
    if not levels:
        phase_list = tuple(x for x in phase_list if x != "growth")
    if pods < 1 or any(v < 0 for v in levels):
        raise ValueError("--pods must be at least 1 and growth levels non-negative")
    return Options(pods=pods, parallel=parallel, parallel_rounds=max(1, parallel_rounds), growth=levels,
                   growth_samples=max(1, growth_samples), floor_samples=max(1, floor_samples), modes=mode_list,
                   reference_dir=reference_dir, conflist=conflist, output_dir=output_dir, phases=phase_list,
                   fallback=fallback, chart=chart, quiet=quiet)


def main(argv: Optional[list[str]] = None, options: Optional[Options] = None) -> int:
    try:
        opts = options or parse_args(argv)
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    out, files = run_bench(opts)
    print(render_table(out))
    for kind, path in files.items():
        print(f"{kind}: {path}")
    for n in out["notes"]:
        if n.startswith("chart skipped"):
            print(n)
    return 1 if out["errors"] else 0


if __name__ == "__main__":
    raise SystemExit(main())
