"""What a bench run measures: the options, their defaults, and the one command line that fills them.

:func:`parse_args` holds the only declaration of the bench's options: ``python -m
cnichain.benchmarks.latency`` and ``cnichain bench`` (which hands its arguments over untouched) both
parse argv with it, so the two accept, validate and document exactly the same options.
"""

from __future__ import annotations

import argparse
import re
from dataclasses import dataclass
from typing import Optional

DEFAULT_REFERENCE_DIR = "/usr/lib/cni"
DEFAULT_CONFLIST = "cnichain-default.conflist"
MODES = ("cold", "warm", "reference")
OURS_MODES = ("cold", "warm")
PHASES = ("floor", "chain", "status", "parallel", "storm", "growth", "pods")
# portmap's "backend" key (reference 1.6.0 and later) and the suffix of the mode that runs it.
PORTMAP_BACKENDS = {"iptables": "iptables", "nftables": "nft"}
SINGLE_REFERENCE = "reference"  # the mode name of --reference-dir, the single-reference shorthand
_REFERENCE_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,31}$")
RESERVED_NAMES = (*OURS_MODES, "python", "shim")  # sample modes the floor phase uses
DESCRIPTION = "``cnichain bench``: per-pod exec-to-exit latency of our plugins, side by side with the reference."


@dataclass
class Options:
    pods: int = 20
    parallel: int = 8
    parallel_rounds: int = 3
    growth: tuple[int, ...] = (0, 100, 1000)
    growth_samples: int = 10
    floor_samples: int = 30
    status_sweeps: int = 20
    modes: tuple[str, ...] = ("cold", "reference")
    reference_dir: str = DEFAULT_REFERENCE_DIR
    conflist: str = ""  # path; empty = the shipped default chain
    output_dir: str = "benchmarks/results"
    phases: tuple[str, ...] = PHASES
    fallback: bool = True  # ours missing a plugin -> use the reference one (reported as such)
    chart: bool = True
    quiet: bool = False
    # (name, plugin dir or debian:SUITE) of each reference; empty = one, "reference", in reference_dir
    references: tuple[tuple[str, str], ...] = ()
    # portmap backends to run each reference with that has the "backend" key (empty: its default)
    reference_portmap_backends: tuple[str, ...] = ()
    storm: tuple[int, ...] = (32, 64)  # pods' chains at once in the storm phase
    agent_memory_limit: int = 512  # MiB: the warm agent's memory cgroup (the DaemonSet's limit; 0: none)
    agent_cpus: float = 2.0  # the warm agent's CPU quota (the DaemonSet's limit; 0: none)
    pods_e2e: int = 10  # pods through containerd's CRI in the pods phase
    containerd_dir: str = "debian:sid"  # containerd 2.x binaries (containerd, its runc shim), or debian:SUITE

    def reference_specs(self) -> tuple[tuple[str, str], ...]:
        """The references to run: the named ones, else --reference-dir as "reference"."""
        return self.references or ((SINGLE_REFERENCE, self.reference_dir),)


def parse_args(argv: Optional[list[str]] = None) -> Options:
    p = argparse.ArgumentParser(prog="cnichain bench", description=DESCRIPTION)
    p.add_argument("--pods", type=int, default=Options.pods, help="pods through the whole chain, one after another")
    p.add_argument("--parallel", type=int, default=Options.parallel, help="pods per parallel batch (0 = skip)")
    p.add_argument("--parallel-rounds", type=int, default=Options.parallel_rounds)
    p.add_argument("--storm", default="32,64", metavar="LIST",
                   help="pods' chains at once in the storm phase, comma-separated ('' = skip)")
    p.add_argument("--agent-memory-limit", type=int, default=Options.agent_memory_limit, metavar="MiB",
                   help="run the warm mode's agent in a memory cgroup of this size, as the DaemonSet limits it (0 = none)")
    p.add_argument("--agent-cpus", type=float, default=Options.agent_cpus, metavar="N",
                   help="... with a CPU quota of N CPUs, the DaemonSet's limit (0 = none)")
    p.add_argument("--growth", default="0,100,1000", help="pods present for the growth phase, comma-separated ('' = skip)")
    p.add_argument("--growth-samples", type=int, default=Options.growth_samples)
    p.add_argument("--floor-samples", type=int, default=Options.floor_samples)
    p.add_argument("--status-sweeps", type=int, default=Options.status_sweeps,
                   help="STATUS sweeps of the whole chain at 1.1.0, as containerd 2.1 polls (0 = skip)")
    p.add_argument("--modes", default="cold,reference", help="comma-separated subset of cold,warm,reference")
    p.add_argument("--reference-dir", default=DEFAULT_REFERENCE_DIR,
                   help="the reference Go plugins, as the single mode 'reference' (shorthand for one --reference)")
    p.add_argument("--reference", action="append", default=[], metavar="NAME=DIR",
                   help="a reference to run side by side (repeatable): its mode name and plugin directory, "
                        "or debian:SUITE for the plugins ./run unpacked from that suite; replaces --reference-dir")
    p.add_argument("--reference-portmap-backends", default="", metavar="LIST",
                   help="run each reference whose portmap has the 'backend' key once per backend "
                        "(comma-separated subset of iptables,nftables; modes NAME-iptables, NAME-nft); "
                        "a reference without the key runs once, on iptables")
    p.add_argument("--pods-e2e", type=int, default=Options.pods_e2e,
                   help="pods through containerd's CRI in the pods phase (RunPodSandbox, StopPodSandbox, "
                        "RemovePodSandbox; 0 = skip)")
    p.add_argument("--containerd-dir", default=Options.containerd_dir,
                   help="directory of containerd 2.x and its runc shim for the pods phase, or debian:SUITE")
    p.add_argument("--conflist", default="", help="conflist to run (default: the shipped default chain)")
    p.add_argument("--output-dir", default=Options.output_dir)
    p.add_argument("--phases", default=",".join(PHASES), help="comma-separated phases to run, in their fixed order")
    p.add_argument("--no-fallback", action="store_true", help="do not stand in reference plugins for ones cnichain lacks")
    p.add_argument("--no-chart", action="store_true", help="no PNG chart")
    p.add_argument("--quiet", action="store_true", help="no progress line")
    a = p.parse_args(argv)
    return options_from(a.pods, a.parallel, a.parallel_rounds, a.growth, a.growth_samples, a.floor_samples, a.modes,
                        a.reference_dir, a.conflist, a.output_dir, a.phases, not a.no_fallback, not a.no_chart, a.quiet,
                        status_sweeps=a.status_sweeps, references=a.reference,
                        reference_portmap_backends=a.reference_portmap_backends, pods_e2e=a.pods_e2e,
                        containerd_dir=a.containerd_dir, storm=a.storm, agent_memory_limit=a.agent_memory_limit,
                        agent_cpus=a.agent_cpus)


def _names(text: str) -> tuple[str, ...]:
    return tuple(x.strip() for x in text.split(",") if x.strip())


def options_from(pods: int, parallel: int, parallel_rounds: int, growth: str, growth_samples: int, floor_samples: int,
                 modes: str, reference_dir: str, conflist: str, output_dir: str, phases: str, fallback: bool,
                 chart: bool, quiet: bool, status_sweeps: int = Options.status_sweeps,
                 references: Optional[list[str]] = None, reference_portmap_backends: str = "",
                 pods_e2e: int = Options.pods_e2e, containerd_dir: str = Options.containerd_dir,
                 storm: str = "32,64", agent_memory_limit: int = Options.agent_memory_limit,
                 agent_cpus: float = Options.agent_cpus) -> Options:
    """Validated :class:`Options` from command-line values; ValueError says what is wrong.

    A phase with nothing to do (``parallel`` 0, no growth levels) is dropped rather than refused.
    """
    mode_list = _names(modes)
    bad = [m for m in mode_list if m not in MODES]
    if bad:
        raise ValueError(f"unknown mode(s) {', '.join(bad)}; expected some of {', '.join(MODES)}")
    phase_list = _names(phases)
    bad = [x for x in phase_list if x not in PHASES]
    if bad:
        raise ValueError(f"unknown phase(s) {', '.join(bad)}; expected some of {', '.join(PHASES)}")
    levels = tuple(int(x) for x in growth.split(",") if x.strip())
    if parallel <= 0:
        phase_list = tuple(x for x in phase_list if x != "parallel")
    if not levels:
        phase_list = tuple(x for x in phase_list if x != "growth")
    widths = tuple(int(x) for x in storm.split(",") if x.strip())
    if not widths:
        phase_list = tuple(x for x in phase_list if x != "storm")
    if any(w < 1 for w in widths):
        raise ValueError("--storm widths must be at least 1")
    if status_sweeps <= 0:
        phase_list = tuple(x for x in phase_list if x != "status")
    if pods_e2e <= 0:
        phase_list = tuple(x for x in phase_list if x != "pods")
    refs = parse_references(references or [])
    backends = _names(reference_portmap_backends)
    bad = [b for b in backends if b not in PORTMAP_BACKENDS]
    if bad:
        raise ValueError(f"unknown portmap backend(s) {', '.join(bad)}; expected some of {', '.join(PORTMAP_BACKENDS)}")
    if pods < 1 or any(v < 0 for v in levels):
        raise ValueError("--pods must be at least 1 and growth levels non-negative")
    return Options(pods=pods, parallel=parallel, parallel_rounds=max(1, parallel_rounds), growth=levels,
                   growth_samples=max(1, growth_samples), floor_samples=max(1, floor_samples),
                   status_sweeps=max(0, status_sweeps), modes=mode_list,
                   reference_dir=reference_dir, conflist=conflist, output_dir=output_dir, phases=phase_list,
                   fallback=fallback, chart=chart, quiet=quiet, references=refs,
                   reference_portmap_backends=tuple(dict.fromkeys(backends)), pods_e2e=max(0, pods_e2e),
                   containerd_dir=containerd_dir, storm=widths, agent_memory_limit=max(0, agent_memory_limit),
                   agent_cpus=max(0.0, agent_cpus))


def parse_references(specs: list[str]) -> tuple[tuple[str, str], ...]:
    """``NAME=DIR`` texts as (name, dir); names unique, short, and none of ours or the floor's."""
    refs: list[tuple[str, str]] = []
    for spec in specs:
        name, sep, where = spec.partition("=")
        name, where = name.strip(), where.strip()
        if not sep or not where:
            raise ValueError(f"--reference {spec!r}: expected NAME=DIR")
        if not _REFERENCE_NAME.match(name) or name in RESERVED_NAMES:
            raise ValueError(f"--reference {spec!r}: the name must be 1-32 letters, digits, '.', '_' or '-', "
                             f"and none of {', '.join(RESERVED_NAMES)}")
        if name in (n for n, _ in refs):
            raise ValueError(f"--reference {name!r} is given twice")
        refs.append((name, where))
    return tuple(refs)
