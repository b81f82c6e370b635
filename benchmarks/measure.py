"""The one measuring core of ``benchmarks/``: timing an exec from exec to exit, and the statistics.

Every benchmark here times a process the way a container runtime sees a plugin: from the exec to
its exit, on the monotonic high-resolution clock, with its output piped as a runtime pipes it.  And
every benchmark reduces samples with the same definitions, so a "p95" or a "median" in one report
means what it means in another:

``percentile``    nearest rank: the smallest sample with at least q% of the samples at or below it
``p95``           ``percentile(values, 95)``
``median``        the middle sample (the mean of the two middle ones for an even count)
``trimmed_mean``  the mean of the middle 60%: steadier than one sample when the clock tick
                  quantises single samples, and robust to a stray slow exec
``stats``         one cell of a report: n, median, p95, min and max, seconds in, milliseconds out

Pure except :func:`timed_exec`; no module of ours outside this one computes a percentile or a
median of measurements (tests/unit/test_measure.py).
"""

from __future__ import annotations

import math
import os
import resource
import statistics
import subprocess
import time
from dataclasses import dataclass
from typing import Iterable, Mapping, Optional, Sequence

clock = time.perf_counter  # the clock every benchmark times with


@dataclass(frozen=True)
class Exec:
    """One timed exec: wall seconds from exec to exit, the child's CPU seconds, and what it said."""

    seconds: float
    cpu_seconds: float
    returncode: int
    stdout: bytes
    stderr: bytes


def timed_exec(argv: Sequence[str], env: Optional[Mapping[str, str]] = None, stdin: bytes = b"",
               timeout: float = 60.0) -> Exec:
    """Run ``argv`` to its exit with ``stdin`` piped in and its output captured, timed exec to exit.

    CPU time is the child's user + system time (the steadier number on a busy machine).  A
    non-zero exit is returned, not raised: a benchmark decides what a failure means.
    """
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = clock()
    proc = subprocess.run(list(argv), input=stdin, env=None if env is None else dict(env), capture_output=True,
                          timeout=timeout, check=False)
    elapsed = clock() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return Exec(elapsed, cpu, proc.returncode, proc.stdout, proc.stderr)


def system_cpu() -> float:
    """Seconds of CPU the whole machine spent outside idle and iowait (``/proc/stat``'s first line):
    what a batch of pods costs the node, the kernel's deferred work (RCU, workqueues) and every
    process it started included.  Counted in clock ticks (10 ms): read it around many pods."""
    with open("/proc/stat") as fh:
        fields = [int(v) for v in fh.readline().split()[1:]]
    busy = sum(fields) - fields[3] - (fields[4] if len(fields) > 4 else 0)
    return busy / os.sysconf("SC_CLK_TCK")


def process_tree_cpu(pid: int) -> float:
    """Seconds of CPU process ``pid`` and every live descendant spent, their reaped children
    included (``/proc/PID/stat``'s utime, stime, cutime, cstime): a long-lived server's share of a
    batch, workers it forked and retired meanwhile included.  Clock ticks: read it around many pods.
    Raises OSError when ``pid`` itself is gone (its share is then unknown, not 0)."""
    tick = os.sysconf("SC_CLK_TCK")
    total, todo, first = 0, [pid], True
    while todo:
        p = todo.pop()
        try:
            with open(f"/proc/{p}/stat") as fh:
                fields = fh.read().rsplit(")", 1)[1].split()
            children: list[int] = []
            for task in os.listdir(f"/proc/{p}/task"):
                with open(f"/proc/{p}/task/{task}/children") as fh:
                    children += [int(c) for c in fh.read().split()]
        except OSError:
            if first:
                raise
            continue  # a descendant that left meanwhile: its parent's cutime has it, or will
        first = False
        total += sum(int(v) for v in fields[11:15])  # utime stime cutime cstime
        todo += children
    return total / tick


def percentile(values: Iterable[float], q: float) -> float:
    """Nearest-rank percentile (q in 0..100) of non-empty ``values``: rank ceil(q/100 * n), at least 1."""
    s = sorted(values)
    if not s:
        raise ValueError("percentile of no samples")
    rank = max(1, math.ceil(q * len(s) / 100.0))
    return s[min(rank, len(s)) - 1]


def p95(values: Iterable[float]) -> float:
    """The 95th nearest-rank percentile: with 20 samples the 19th, never the maximum by rounding."""
    return percentile(values, 95)


def median(values: Iterable[float]) -> float:
    """The median of non-empty ``values``."""
    return statistics.median(list(values))


def trimmed_mean(values: Iterable[float]) -> float:
    """The mean of the middle 60% (a fifth cut from each end; all of them when fewer than five)."""
    ordered = sorted(values)
    if not ordered:
        raise ValueError("trimmed mean of no samples")
    cut = len(ordered) // 5
    return statistics.fmean(ordered[cut:len(ordered) - cut])


def stats(values: Sequence[float]) -> dict:
    """n, median, p95, min and max in ms of samples in seconds (``{"n": 0}`` when there are none)."""
    if not values:
        return {"n": 0}
    return {"n": len(values), "median_ms": median(values) * 1000, "p95_ms": p95(values) * 1000,
            "min_ms": min(values) * 1000, "max_ms": max(values) * 1000}
