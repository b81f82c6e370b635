"""What a bench run measures: the options, their defaults, and the one command line that fills them.

:func:`parse_args` holds the only declaration of the bench's options: ``python -m
cnichain.benchmarks.latency`` and ``cnichain bench`` (which hands its arguments over untouched) both
parse argv with it, so the two accept, validate and document exactly the same options.
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from typing import Optional

DEFAULT_REFERENCE_DIR = "/usr/lib/cni"
DEFAULT_CONFLIST = "cnichain-default.conflist"
MODES = ("cold", "warm", "reference")
PHASES = ("floor", "chain", "status", "parallel", "growth")
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


def parse_args(argv: Optional[list[str]] = None) -> Options:
    p = argparse.ArgumentParser(prog="cnichain bench", description=DESCRIPTION)
    p.add_argument("--pods", type=int, default=Options.pods, help="pods through the whole chain, one after another")
    p.add_argument("--parallel", type=int, default=Options.parallel, help="pods per parallel batch (0 = skip)")
    p.add_argument("--parallel-rounds", type=int, default=Options.parallel_rounds)
    p.add_argument("--growth", default="0,100,1000", help="pods present for the growth phase, comma-separated ('' = skip)")
    p.add_argument("--growth-samples", type=int, default=Options.growth_samples)
    p.add_argument("--floor-samples", type=int, default=Options.floor_samples)
    p.add_argument("--status-sweeps", type=int, default=Options.status_sweeps,
                   help="STATUS sweeps of the whole chain at 1.1.0, as containerd 2.1 polls (0 = skip)")
    p.add_argument("--modes", default="cold,reference", help="comma-separated subset of cold,warm,reference")
    p.add_argument("--reference-dir", default=DEFAULT_REFERENCE_DIR)
    p.add_argument("--conflist", default="", help="conflist to run (default: the shipped default chain)")
    p.add_argument("--output-dir", default=Options.output_dir)
    p.add_argument("--phases", default=",".join(PHASES), help="comma-separated phases to run, in their fixed order")
    p.add_argument("--no-fallback", action="store_true", help="do not stand in reference plugins for ones cnichain lacks")
    p.add_argument("--no-chart", action="store_true", help="no PNG chart")
    p.add_argument("--quiet", action="store_true", help="no progress line")
    a = p.parse_args(argv)
    return options_from(a.pods, a.parallel, a.parallel_rounds, a.growth, a.growth_samples, a.floor_samples, a.modes,
                        a.reference_dir, a.conflist, a.output_dir, a.phases, not a.no_fallback, not a.no_chart, a.quiet,
                        status_sweeps=a.status_sweeps)


def _names(text: str) -> tuple[str, ...]:
    return tuple(x.strip() for x in text.split(",") if x.strip())


def options_from(pods: int, parallel: int, parallel_rounds: int, growth: str, growth_samples: int, floor_samples: int,
                 modes: str, reference_dir: str, conflist: str, output_dir: str, phases: str, fallback: bool,
                 chart: bool, quiet: bool, status_sweeps: int = Options.status_sweeps) -> Options:
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
    if status_sweeps <= 0:
        phase_list = tuple(x for x in phase_list if x != "status")
    if pods < 1 or any(v < 0 for v in levels):
        raise ValueError("--pods must be at least 1 and growth levels non-negative")
    return Options(pods=pods, parallel=parallel, parallel_rounds=max(1, parallel_rounds), growth=levels,
                   growth_samples=max(1, growth_samples), floor_samples=max(1, floor_samples),
                   status_sweeps=max(0, status_sweeps), modes=mode_list,
                   reference_dir=reference_dir, conflist=conflist, output_dir=output_dir, phases=phase_list,
                   fallback=fallback, chart=chart, quiet=quiet)
