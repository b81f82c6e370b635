"""Running the bench end to end: a throwaway lab, the phases in order, the files, the exit code."""

from __future__ import annotations

import json
import os
import sys
import time
from typing import Callable, Optional

from cnichain.benchmarks.latency import modes
from cnichain.benchmarks.latency.chart import write_chart
from cnichain.benchmarks.latency.growth import run_growth
from cnichain.benchmarks.latency.options import Options, parse_args
from cnichain.benchmarks.latency.phases import run_chain, run_floor, run_parallel
from cnichain.benchmarks.latency.pods import run_pods
from cnichain.benchmarks.latency.render import render_table
from cnichain.benchmarks.latency.session import Bench
from cnichain.benchmarks.latency.status import run_status
from cnichain.benchmarks.latency.storm import run_storm
from cnichain.benchmarks.latency.summary import summarize
from cnichain.tools.lab import Lab

# The phases run in this order, whatever order --phases names them in.
PHASE_RUNNERS: tuple[tuple[str, Callable[[Bench], None]], ...] = (
    ("floor", run_floor), ("chain", run_chain), ("status", run_status), ("parallel", run_parallel),
    ("storm", run_storm), ("growth", run_growth), ("pods", run_pods),
)


def run_bench(options: Options) -> tuple[dict, dict[str, str]]:
    """Run the bench in a throwaway lab; return the summary and the files written."""
    if os.geteuid() != 0:
        raise SystemExit("cnichain bench needs root: it creates network namespaces")
    load0 = os.getloadavg()
    with Lab(prefix="cnib") as lab:
        bench = Bench(options, lab)
        try:
            modes.setup(bench)
            started = time.time()
            for phase, run in PHASE_RUNNERS:
                if phase in options.phases:
                    run(bench)
            bench.loadavg = [load0, os.getloadavg()]
            out = summarize(bench, time.time() - started)
            out["run_id"] = lab.run_id
        finally:
            for ctx in reversed(bench.cleanup):  # the pods nodes before the agent they use
                ctx.__exit__(None, None, None)
    return out, write_outputs(out, options)


def write_outputs(out: dict, options: Options) -> dict[str, str]:
    """``bench-<time>.json``, ``.txt`` and (when charting works) ``.png`` in the output directory.

    A chart that could not be drawn adds a note to ``out`` saying why.
    """
    files: dict[str, str] = {}
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
    return files


def main(argv: Optional[list[str]] = None, options: Optional[Options] = None) -> int:
    """Exit status: 0 when every exec succeeded, 1 when some failed, 2 for bad options."""
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
