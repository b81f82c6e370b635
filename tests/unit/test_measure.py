"""benchmarks/measure.py: the one p95, median and trimmed mean, the exec timer, and that no other
module of ours computes statistics of measurements its own way."""

from __future__ import annotations

import ast
import os
import sys
import time

import pytest

from cnichain.benchmarks import measure

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PACKAGES = ("agent", "benchmarks", "cli", "common", "node", "plugins", "podstate", "tools")
MEASURE = os.path.join(ROOT, "benchmarks", "measure.py")
# what only measure.py may define or call: a second definition is a second meaning of "p95"
STAT_NAMES = {"pct", "percentile", "percentiles", "quantile", "quantiles", "p95", "p99", "median", "trimmed_mean",
              "fmean", "mean"}


@pytest.mark.parametrize("q,expected", [(0, 1), (50, 5), (51, 6), (90, 9), (95, 10), (100, 10)])
def test_percentile_is_nearest_rank(q, expected):
    assert measure.percentile([float(v) for v in range(10, 0, -1)], q) == expected


@pytest.mark.parametrize("n", [1, 2, 8, 10, 19, 20, 30, 100])
def test_p95_is_rank_ceil_95_percent_never_one_too_high(n):
    """ceil(0.95 n): with 20 samples p95 is the 19th, not the maximum."""
    values = [float(v) for v in range(n, 0, -1)]
    assert measure.p95(values) == -(-95 * n // 100)


def test_median_trimmed_mean_and_empty_input():
    assert measure.median([3.0, 1.0, 2.0]) == 2.0 and measure.median([4.0, 1.0, 2.0, 3.0]) == 2.5
    # ten samples: two cut from each end, the mean of the middle six
    assert measure.trimmed_mean([100.0, 1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0, -50.0]) == pytest.approx(4.5)
    assert measure.trimmed_mean([1.0, 9.0]) == 5.0  # fewer than five: nothing to cut
    for fn in (measure.p95, measure.trimmed_mean):
        with pytest.raises(ValueError):
            fn([])


def test_stats_cell_in_ms_and_empty():
    assert measure.stats([]) == {"n": 0}
    cell = measure.stats([0.001, 0.002, 0.003, 0.010])
    assert cell["n"] == 4 and cell["median_ms"] == pytest.approx(2.5) and cell["p95_ms"] == pytest.approx(10)
    assert cell["min_ms"] == pytest.approx(1) and cell["max_ms"] == pytest.approx(10)


def test_timed_exec_times_exec_to_exit_and_returns_what_the_child_said():
    run = measure.timed_exec([sys.executable, "-I", "-S", "-c", "import sys; sys.stdout.write(sys.stdin.read()); sys.exit(3)"],
                             stdin=b"hello")
    assert (run.returncode, run.stdout) == (3, b"hello")
    assert run.seconds > 0 and run.cpu_seconds >= 0


def _sources() -> list[str]:
    out = []
    for pkg in PACKAGES:
        for dirpath, dirnames, filenames in os.walk(os.path.join(ROOT, pkg)):
            dirnames[:] = [d for d in dirnames if d != "__pycache__"]
            out += [os.path.join(dirpath, f) for f in filenames if f.endswith(".py")]
    return sorted(p for p in out if p != MEASURE)


def _stat_code(path: str) -> list[str]:
    """Where ``path`` defines a statistic or reaches for the statistics module itself."""
    with open(path, encoding="utf-8") as fh:
        tree = ast.parse(fh.read(), path)
    found = []
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name in STAT_NAMES:
            found.append(f"line {node.lineno}: defines {node.name}()")
        elif isinstance(node, ast.Import) and any(a.name == "statistics" for a in node.names):
            found.append(f"line {node.lineno}: imports statistics")
        elif isinstance(node, ast.ImportFrom) and node.module == "statistics":
            found.append(f"line {node.lineno}: imports from statistics")
    return found


def test_no_other_module_defines_a_percentile_or_a_median():
    offenders = {os.path.relpath(p, ROOT): hits for p in _sources() if (hits := _stat_code(p))}
    assert not offenders, f"statistics outside benchmarks/measure.py (use it instead): {offenders}"


def test_process_tree_cpu_counts_a_live_descendant_and_refuses_a_gone_process():
    """A child's CPU is the parent's tree's while it lives (not only once reaped); a pid that is
    gone raises instead of reading as no CPU."""
    import subprocess

    burn = "import time\nend = time.process_time() + 0.3\nwhile time.process_time() < end: pass\ntime.sleep(30)"
    before = measure.process_tree_cpu(os.getpid())
    child = subprocess.Popen([sys.executable, "-c", burn])
    try:
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline and measure.process_tree_cpu(child.pid) < 0.25:
            time.sleep(0.05)
        assert measure.process_tree_cpu(os.getpid()) - before >= 0.25
    finally:
        child.kill()
        child.wait()
    with pytest.raises(OSError):
        measure.process_tree_cpu(child.pid)
