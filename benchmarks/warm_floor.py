"""Each plugin's warm request next to the kernel work it does, and the reference's exec, in one run.

    sudo .venv/bin/python -m cnichain.benchmarks.warm_floor --pods 20 --reference-dir debian:sid
    ... --profile bandwidth:DEL,host-local:ADD     # those requests under cProfile instead (stderr)

The shipped default chain (bridge with host-local, portmap, bandwidth, tuning, route-override) runs
pod after pod in two node namespaces of a throwaway lab, interleaved:

* **warm**: every plugin's handler as a long-lived agent worker runs it -- every plugin and what a
  request needs imported and exercised first (the agent's own warm-up), then per request the
  worker's state reset (environment, no libnftables context, fresh log settings) and the
  skeleton's ``dispatch`` on the request's environment and stdin, the thread inside the node
  namespace.  bridge's host-local runs in place, as in the agent's worker.  The time is
  ``dispatch`` alone: what a worker spends on the request, without the shim's exec, the agent's
  hand-over and the namespace entry, which the latency bench (``--modes warm``) includes.
* **kernel**: during each warm request, the time of the kernel operations it performs, recorded by
  the opt-in hooks of :mod:`cnichain.common.kerneltime` -- each rtnetlink request's ``send``, each
  libnftables command, each sysctl read or write -- so "warm - kernel" is the Python a request
  spends around its kernel work (parsing, planning, pyroute2's message building and decoding).
* **reference**: the reference plugins in ``--reference-dir`` exec'd by the same runner (exec to
  exit), with the same configs.

The bare interpreter start (``python3 -I -S -c pass``) of the run is measured too.  Output: a table
on stdout and ``warm-floor-<time>.json`` in ``--output-dir``; ratios are warm / reference on
medians.  route-override has no reference and is reported alone.
"""

from __future__ import annotations

import argparse
import io
import resource
import json
import os
import sys
import time
from typing import Any, Optional

from cnichain.benchmarks.latency.options import DEFAULT_CONFLIST, DEFAULT_REFERENCE_DIR
from cnichain.benchmarks.measure import clock, stats, system_cpu, timed_exec
from cnichain.podstate.runtime import Attachment, ConfList, PluginFailed, Runtime

SCHEMA = "cnichain-warm-floor/1"
KINDS = ("netlink", "nftables", "sysctl")
COMMANDS = ("ADD", "DEL")


class WarmRuntime(Runtime):
    """The runner with every plugin exec replaced by the plugin's handler, run as a warm worker
    runs it (see the module docstring); each request's time and kernel spans go to ``records``."""

    def __init__(self, plugins: dict[str, Any], bin_dirs: list[str], cache_dir: str, node_netns: str,
                 profile: Optional[set[str]] = None) -> None:
        super().__init__(bin_dirs, cache_dir, node_netns=node_netns)
        self.plugins = plugins
        self.records: list[dict] = []
        self.profile = profile or set()  # "plugin:COMMAND" run under cProfile (then not timed)
        self.profiler: Any = None

    def exec_plugin(self, plugin_type: str, command: str, att: Optional[Attachment], conf: dict) -> bytes:
        from cnichain.agent import worker
        from cnichain.common import invoke, kerneltime, netns, nft
        from cnichain.common.invoke import error_from_output
        from cnichain.common.skel import dispatch

        env = {"CNI_COMMAND": command, "CNI_PATH": ":".join(self.bin_dirs),
               "PATH": os.environ.get("PATH", "/usr/sbin:/usr/bin:/sbin:/bin")}
        if att is not None:
            env.update({"CNI_CONTAINERID": att.container_id, "CNI_NETNS": att.netns, "CNI_IFNAME": att.ifname})
            if att.cni_args:
                env["CNI_ARGS"] = ";".join(f"{k}={v}" for k, v in att.cni_args)
        stdin = json.dumps(conf).encode()
        saved = dict(os.environ)
        out, err = io.StringIO(), io.StringIO()
        delegated: list[dict] = []
        assert self.node_netns
        try:
            with netns.entered(self.node_netns):
                worker.reset_process_state(env)
                invoke.delegate_runner = self._delegate(delegated)
                profiled = f"{plugin_type}:{command}" in self.profile
                if profiled:
                    self._profiler().enable()
                kerneltime.start()
                started, cpu_started = clock(), time.thread_time()
                try:
                    code = dispatch(self.plugins[plugin_type], env, stdin, out, err)
                finally:
                    elapsed, cpu = clock() - started, time.thread_time() - cpu_started
                    spans = kerneltime.stop()
                    if profiled:
                        self._profiler().disable()
        finally:
            invoke.delegate_runner = None
            nft.reset()
            for key in list(os.environ):
                del os.environ[key]
            os.environ.update(saved)
        if not profiled:
            self.records.append({"plugin": plugin_type, "command": command, "seconds": elapsed, "cpu": cpu,
                                 "kernel": _by_kind(spans), "code": code})
        self.records.extend(delegated)
        if code != 0:
            raise PluginFailed(plugin_type, command, error_from_output(out.getvalue().encode(), err.getvalue().encode(), code))
        return out.getvalue().encode()

    def _profiler(self) -> Any:
        if self.profiler is None:
            import cProfile

            self.profiler = cProfile.Profile()
        return self.profiler

    def _delegate(self, delegated: list[dict]) -> Any:
        """A delegate runner that runs one of our plugins' dispatch in place, timed on its own."""
        from cnichain.agent.delegates import DelegateRunner

        runner = DelegateRunner(self.plugins, "")

        def run(binary: str, env: dict, stdin: bytes) -> Optional[tuple[int, bytes, bytes]]:
            from cnichain.common import kerneltime

            ptype = os.path.basename(binary)
            if ptype not in self.plugins:
                return None
            outer = kerneltime.stop()  # the delegate's spans are its own (and also its caller's)
            kerneltime.start()
            profiled = f"{ptype}:{env.get('CNI_COMMAND', '')}" in self.profile
            if profiled:
                self._profiler().enable()
            started, cpu_started = clock(), time.thread_time()
            try:
                return runner.in_process(ptype, env, stdin)
            finally:
                elapsed, cpu = clock() - started, time.thread_time() - cpu_started
                if profiled:
                    self._profiler().disable()
                inner = kerneltime.stop()
                kerneltime.start()
                assert kerneltime.spans is not None
                kerneltime.spans.extend(outer + inner)
                delegated.append({"plugin": f"{ptype} (in place)", "command": env.get("CNI_COMMAND", ""),
                                  "seconds": elapsed, "cpu": cpu, "kernel": _by_kind(inner), "code": 0})

        return run


class CpuRuntime(Runtime):
    """The runner, each plugin exec also timed in CPU: the child's user + system time (its own
    children's included once it reaped them), read as this process's RUSAGE_CHILDREN around the
    exec -- exact here, where one exec runs at a time."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.records: list[dict] = []

    def exec_plugin(self, plugin_type: str, command: str, att: Optional[Attachment], conf: dict) -> bytes:
        before, started = children_cpu(), clock()
        code = 0
        try:
            return super().exec_plugin(plugin_type, command, att, conf)
        except PluginFailed:
            code = 1
            raise
        finally:
            self.records.append({"plugin": plugin_type, "command": command, "seconds": clock() - started,
                                 "cpu": children_cpu() - before, "code": code})


def children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def _by_kind(spans: list[tuple[str, float]]) -> dict[str, float]:
    out = {k: 0.0 for k in KINDS}
    for kind, seconds in spans:
        out[kind] = out.get(kind, 0.0) + seconds
    return out


def warm_plugins() -> dict[str, Any]:
    """Every plugin, imported and exercised as the agent does before its workers serve."""
    from cnichain.agent.warmup import exercise, load_plugins, preload

    plugins = load_plugins()
    saved = sys.stdout, sys.stderr
    sys.stdout, sys.stderr = io.StringIO(), io.StringIO()
    try:
        preload(plugins)
        exercise(plugins)
    finally:
        sys.stdout, sys.stderr = saved
    return plugins


def attachment(name: str, i: int, pod: str) -> Attachment:
    """Pod ``i``: a port mapping and a bandwidth limit, as kubelet sends (DEL: from the cache)."""
    capabilities = {
        "portMappings": [{"hostPort": 20000 + i, "containerPort": 80, "protocol": "tcp"}],
        "bandwidth": {"ingressRate": 100_000_000, "ingressBurst": 10_000_000,
                      "egressRate": 100_000_000, "egressBurst": 10_000_000},
    }
    args = [("IgnoreUnknown", "1"), ("K8S_POD_NAMESPACE", "bench"), ("K8S_POD_NAME", f"pod-{i}")]
    return Attachment(f"wf-{name}-{i}", pod, "eth0", args, capabilities)


def chain(base: dict, workdir: str, keep: Optional[set[str]] = None) -> ConfList:
    from cnichain.tools.lab import isolate_conflist

    data = isolate_conflist(base, workdir)
    if keep is not None:
        data["plugins"] = [p for p in data["plugins"] if p["type"] in keep]
    return ConfList.from_dict(data)


def floor(samples: int) -> list[float]:
    return [timed_exec([sys.executable, "-I", "-S", "-c", "pass"]).seconds for _ in range(samples)]


def median_ms(cell: Optional[dict]) -> Optional[float]:
    """The median of a :func:`measure.stats` cell (None for an empty one)."""
    return cell.get("median_ms") if cell else None


def mean_ms(values: list[float]) -> Optional[float]:
    return sum(values) / len(values) * 1000 if values else None


def ratio(ours: Optional[float], ref: Optional[float]) -> Optional[float]:
    return None if ours is None or not ref else ours / ref


def run(pods: int, reference_dir: str, floor_samples: int, conflist: str = "",
        profile: Optional[set[str]] = None) -> dict:
    from cnichain.node import launchers
    from cnichain.tools.lab import Lab

    with open(conflist or os.path.join(launchers.conflists_dir(), DEFAULT_CONFLIST), "rb") as fh:
        base = json.loads(fh.read())
    plugins = warm_plugins()
    ref_types = {t for t in (p["type"] for p in base["plugins"]) if os.path.isfile(os.path.join(reference_dir, t))}
    out: dict = {"schema": SCHEMA, "pods": pods, "reference_dir": reference_dir,
                 "started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
    with Lab(prefix="cnicwf") as lab:
        bin_dir = lab.path("bin")
        os.makedirs(bin_dir, exist_ok=True)
        launchers.install(bin_dir)
        warm = WarmRuntime(plugins, [bin_dir], lab.path("cache-warm"), lab.node, profile)
        ref_node = lab.netns("refnode")
        ref = CpuRuntime([reference_dir], lab.path("cache-ref"), node_netns=ref_node)
        ref_records = ref.records
        chain_cpu: dict[str, list[float]] = {"warm": [], "ref": []}
        ours_chain = chain(base, lab.path("warm"))
        ref_chain = chain(base, lab.path("ref"), ref_types)
        out["floor"] = stats(floor(floor_samples // 2))
        for i in range(pods):
            order = [("warm", warm, ours_chain), ("ref", ref, ref_chain)]
            if i % 2:
                order.reverse()
            for name, runtime, conf in order:
                pod = lab.netns(f"{name[:1]}{i}")
                att = attachment(name, i, pod)
                before = system_cpu()
                runtime.add(conf, att)
                runtime.delete(conf, att)
                chain_cpu[name].append(system_cpu() - before)
                lab.delete_netns(pod)
            print(f"[warm-floor] pod {i + 1}/{pods}", file=sys.stderr)
        later = stats(floor(floor_samples - floor_samples // 2))
        out["floor_after"] = later
    out["rows"] = summarize(warm.records, ref_records)
    # A mean, not a median: /proc/stat counts in clock ticks (10 ms), so one pod reads 0 or 10 ms
    # more than it cost, and only the mean over the pods converges.
    out["chain_system_cpu"] = {name: {"n": len(v), "mean_ms": mean_ms(v)} for name, v in chain_cpu.items()}
    out["chain_system_cpu_ratio"] = ratio(mean_ms(chain_cpu["warm"]), mean_ms(chain_cpu["ref"]))
    if warm.profiler is not None:
        import pstats

        text = io.StringIO()
        pstats.Stats(warm.profiler, stream=text).sort_stats("cumulative").print_stats(40)
        out["profile"] = text.getvalue()
    return out


def summarize(warm: list[dict], ref: list[dict]) -> list[dict]:
    """One row per plugin and command: warm, kernel (by kind), warm - kernel, reference, ratio."""
    rows = []
    names = []
    for rec in warm:
        if rec["plugin"] not in names:
            names.append(rec["plugin"])
    for plugin in names:
        for command in COMMANDS:
            recs = [r for r in warm if r["plugin"] == plugin and r["command"] == command and r["code"] == 0]
            if not recs:
                continue
            kernel = [sum(r["kernel"].values()) for r in recs]
            row: dict = {
                "plugin": plugin, "command": command,
                "warm": stats([r["seconds"] for r in recs]),
                "cpu": stats([r["cpu"] for r in recs]),
                "kernel": stats(kernel),
                "kernel_by_kind": {k: stats([r["kernel"].get(k, 0.0) for r in recs]) for k in KINDS},
                "python": stats([r["seconds"] - k for r, k in zip(recs, kernel)]),
            }
            refs = [r for r in ref if r["plugin"] == plugin and r["command"] == command and r["code"] == 0]
            row["reference"] = stats([r["seconds"] for r in refs])
            row["reference_cpu"] = stats([r["cpu"] for r in refs])
            row["ratio"] = ratio(median_ms(row["warm"]), median_ms(row["reference"]))
            row["cpu_ratio"] = ratio(median_ms(row["cpu"]), median_ms(row["reference_cpu"]))
            rows.append(row)
    return rows


def render(out: dict) -> str:
    def ms(cell: Optional[dict]) -> str:
        value = median_ms(cell)
        return "-" if value is None else f"{value:.2f}"

    lines = [
        f"warm floor, {out['pods']} pods, reference {out['reference_dir']}",
        f"python -I -S -c pass: {ms(out.get('floor'))} ms before, {ms(out.get('floor_after'))} ms after (median)",
        "",
        f"{'plugin':<24}{'cmd':<5}{'warm':>8}{'kernel':>8}{'netlink':>9}{'nft':>7}{'sysctl':>8}"
        f"{'python':>8}{'ref':>8}{'warm/ref':>10}{'cpu':>8}{'ref cpu':>9}{'cpu/ref':>9}",
    ]
    for row in out["rows"]:
        kk = row["kernel_by_kind"]
        r, c = row["ratio"], row.get("cpu_ratio")
        lines.append(
            f"{row['plugin']:<24}{row['command']:<5}{ms(row['warm']):>8}{ms(row['kernel']):>8}"
            f"{ms(kk['netlink']):>9}{ms(kk['nftables']):>7}{ms(kk['sysctl']):>8}{ms(row['python']):>8}"
            f"{ms(row['reference']):>8}{'-' if r is None else f'{r:.2f}x':>10}"
            f"{ms(row.get('cpu')):>8}{ms(row.get('reference_cpu')):>9}{'-' if c is None else f'{c:.2f}x':>9}"
        )
    lines.append("")
    lines.append("medians in ms; python = warm - kernel per request; warm/ref on medians; cpu = the warm "
                 "handler's thread CPU, the reference exec's CPU (user + system, kernel work in its calls)")
    whole = out.get("chain_system_cpu")
    if whole:
        c = out.get("chain_system_cpu_ratio")
        lines.append(f"whole chain ADD+DEL per pod, system-wide CPU (mean of {whole['warm']['n']}): warm "
                     f"{whole['warm']['mean_ms'] or 0:.1f} ms, reference {whole['ref']['mean_ms'] or 0:.1f} ms, "
                     f"{'-' if c is None else f'{c:.2f}x'}")
    return "\n".join(lines)


def main(argv: Optional[list[str]] = None) -> int:
    parser = argparse.ArgumentParser(description="Warm plugin requests next to their kernel time and the reference.")
    parser.add_argument("--pods", type=int, default=20)
    parser.add_argument("--reference-dir", default=DEFAULT_REFERENCE_DIR,
                        help="the reference plugins: a directory, or debian:SUITE for the deb cache's unpacked package")
    parser.add_argument("--floor-samples", type=int, default=20)
    parser.add_argument("--conflist", default="", help="a conflist to run instead of the shipped default chain")
    parser.add_argument("--output-dir", default="benchmarks/results")
    parser.add_argument("--profile", default="", metavar="PLUGIN:CMD,...",
                        help="run these under cProfile instead of timing them; the profile goes to stderr")
    o = parser.parse_args(argv)
    if os.geteuid() != 0:
        print("warm_floor: run as root (it creates network namespaces)", file=sys.stderr)
        return 2
    from cnichain.tools.debcache import resolve_plugins_dir

    reference_dir = resolve_plugins_dir(o.reference_dir)
    if reference_dir is None:
        print(f"warm_floor: {o.reference_dir} is not in the deb cache (./run tests fetches it)", file=sys.stderr)
        return 2
    profile = {p for p in o.profile.split(",") if p}
    out = run(o.pods, reference_dir, o.floor_samples, o.conflist, profile)
    if "profile" in out:
        print(out["profile"], file=sys.stderr)
    text = render(out)
    print(text)
    os.makedirs(o.output_dir, exist_ok=True)
    stamp = time.strftime("%Y%m%d-%H%M%S", time.gmtime())
    path = os.path.join(o.output_dir, f"warm-floor-{stamp}.json")
    with open(path, "w") as fh:
        json.dump(out, fh, indent=1)
    print(f"wrote {path}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
