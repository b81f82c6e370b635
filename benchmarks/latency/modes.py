"""Setting up the implementations under test: launchers, one node namespace each, their chains.

Each mode gets its own node namespace, pod namespaces, IPAM directory and result cache, so the
modes never see each other's bridges, rules or reservations.  "cold" is our installed executables
(never forwarding to an agent), "warm" the same executables pointed at an agent started for the run
(the native shim when it was built, else the Python launchers; the summary says which), and one
reference mode per reference and portmap backend (:mod:`references`) runs the Go plugins.  A plugin
a mode lacks is stood in by the first reference's binary (when ``fallback``) and recorded as such
in the mode's provenance, or left out and listed as skipped.
"""

from __future__ import annotations

import json
import os

from cnichain.benchmarks.latency import references
from cnichain.benchmarks.latency.options import DEFAULT_CONFLIST
from cnichain.benchmarks.latency.session import Bench, Mode
from cnichain.tools.lab import isolate_conflist
from cnichain.podstate.runtime import ConfList, Runtime


def setup(bench: Bench) -> None:
    """Install our launchers, make every requested mode that can run here, give each its chain."""
    from cnichain.node import launchers

    o = bench.o
    report = launchers.install(bench.our_bin)
    ours = sorted(os.path.basename(p) for p in report.written + report.unchanged
                  if os.path.dirname(p) == bench.our_bin)
    bench.executables = executables_kind(bench.our_bin)
    missing = sorted(set(launchers.PLUGINS) - set(ours))
    if missing:
        bench.notes.append(f"not yet implemented by cnichain: {', '.join(missing)}")
    refs = references.resolve(o, bench.notes)
    bench.primary_reference_dir = refs[0].bin_dir if refs else ""
    ours_dirs = [bench.our_bin] + ([bench.primary_reference_dir] if o.fallback and refs else [])
    for name in o.modes:
        if name == "reference":
            seen = set(bench.modes)
            for v in references.variants(bench.lab, o, refs, bench.notes):
                if v.mode in seen:
                    bench.notes.append(f"reference mode {v.mode} named twice; the second is left out")
                    continue
                seen.add(v.mode)
                mode = make_mode(bench, v.mode, [v.reference.bin_dir], kind="reference")
                mode.portmap_backend, mode.reference, mode.version = v.portmap_backend, v.reference.name, \
                    v.reference.version
            continue
        why = warm_unavailable() if name == "warm" else ""
        if why:
            bench.notes.append(f"warm skipped: {why}")
            continue
        make_mode(bench, name, list(ours_dirs))
    if "warm" in bench.modes:
        start_warm_agent(bench, bench.modes["warm"])
    base = load_conflist(o.conflist)
    for mode in bench.modes.values():
        mode.conflist = chain_for(bench, mode, base)


def executables_kind(bin_dir: str) -> str:
    """"native shim" when the installed executables are the static shim, else "python launcher"."""
    from cnichain.node.launchers import python_launcher

    for name in sorted(os.listdir(bin_dir)):
        path = os.path.join(bin_dir, name)
        if os.path.isfile(path) and not name.startswith("."):
            return "native shim" if python_launcher(path) != path else "python launcher"
    return ""


def make_mode(bench: Bench, name: str, dirs: list[str], kind: str = "ours") -> Mode:
    """The mode ``name`` running the plugins of ``dirs``, in its own node namespace, registered."""
    node = bench.lab.netns(f"node-{len(bench.modes)}")  # mode names can be long; netns names stay short
    workdir = os.path.join(bench.lab.workdir, name)
    os.makedirs(workdir, mode=0o700, exist_ok=True)
    mode = Mode(name, dirs, node, workdir, runtime=None, kind=kind)  # type: ignore[arg-type]
    mode.runtime = Runtime(dirs, os.path.join(workdir, "cache"), node_netns=node, on_exec=bench.recorder(mode),
                           timeout=60, extra_env=mode_env(name))
    bench.modes[name] = mode
    return mode


def mode_env(name: str) -> dict[str, str]:
    """cold: never forward to an agent, even one running on the machine; warm: set at start."""
    return {"CNICHAIN_AGENT_SOCKET": "off"} if name == "cold" else {}


def load_conflist(path: str) -> dict:
    """The conflist to run (default: the shipped default chain), refused early if broken."""
    if not path:
        from cnichain.node.launchers import conflists_dir

        path = os.path.join(conflists_dir(), DEFAULT_CONFLIST)
    with open(path, "rb") as fh:
        data = json.loads(fh.read())
    ConfList.from_dict(data, path)
    return data


def chain_for(bench: Bench, mode: Mode, base: dict) -> ConfList:
    """``base`` isolated into the mode's workdir, without the plugins the mode has no binary for."""
    data = isolate_conflist(base, mode.workdir)
    kept = []
    for plugin in ConfList.from_dict(data).plugins:
        ptype = plugin["type"]
        where = bench.which(mode, ptype)
        if where is None:
            mode.skipped[ptype] = "the reference has no such plugin" if mode.is_reference else "no such plugin"
            continue
        if ptype == "portmap" and mode.portmap_backend:
            plugin = dict(plugin, backend=mode.portmap_backend)
        mode.provenance[ptype] = where
        ipam = plugin.get("ipam")
        if isinstance(ipam, dict) and ipam.get("type"):
            ipam_where = bench.which(mode, str(ipam["type"]))
            if ipam_where:
                mode.provenance[str(ipam["type"])] = ipam_where
        kept.append(plugin)
    data["plugins"] = kept
    return ConfList.from_dict(data)


def warm_unavailable() -> str:
    """Why the warm mode cannot run here ("" when it can)."""
    try:
        from cnichain import agent
    except ImportError:
        return "the node agent (cnichain.agent) is not available"
    if not hasattr(agent, "running_agent"):
        return "cnichain.agent has no running_agent() entry point"
    return ""


def start_warm_agent(bench: Bench, mode: Mode) -> None:
    """Start the node agent for ``mode`` inside its node namespace; point that mode's shims at it.

    The launchers' shim forwards to the socket named by ``CNICHAIN_AGENT_SOCKET``; the cold mode
    sets it to ``off`` so an agent running on the machine can never leak into the cold numbers.
    The agent is stopped (drained) when the run ends, through ``bench.cleanup``.
    """
    from cnichain import agent

    socket_path = os.path.join(mode.workdir, "agent.sock")
    preexec = None
    o = bench.o
    if o.agent_memory_limit and os.path.isdir("/sys/fs/cgroup"):
        from cnichain.tools.memcg import MemCgroup

        cg = MemCgroup(o.agent_memory_limit << 20, cpus=o.agent_cpus or None)
        bench.cleanup.append(cg)  # exited after the agent (cleanup runs in reverse)
        bench.agent_cgroup = cg
        preexec = cg.join
        bench.notes.append(f"warm: the agent runs in a {o.agent_memory_limit} MiB memory cgroup"
                           + (f" with a {o.agent_cpus:g}-CPU quota" if o.agent_cpus else ""))
    ctx = agent.running_agent(socket_path, netns=mode.node, preexec=preexec)
    bench.agent = ctx.__enter__()
    bench.agent_pool = agent.AgentConfig().pool_size
    bench.cleanup.append(ctx)
    mode.runtime.extra_env["CNICHAIN_AGENT_SOCKET"] = socket_path
    from cnichain.benchmarks.latency.storm import read_idle

    read_idle(bench)
