"""The bench's result document (schema ``cnichain-bench/1``): every sample reduced to statistics.

Pure apart from reading the clock and the machine's identity for the header: it takes what the
phases recorded on a :class:`~cnichain.benchmarks.latency.session.Bench` (or anything with the same
attributes) and returns a JSON-ready dict that the table, the chart and the targets are built from.
Only successful execs count; failures are listed under ``errors``.
"""

from __future__ import annotations

import os
import platform
import time
from typing import Any, Callable, Optional

from cnichain.benchmarks.latency.stats import median_ratio, targets
from cnichain.benchmarks.measure import stats

SCHEMA = "cnichain-bench/1"
COMMANDS = ("ADD", "DEL", "ADD+DEL")


def ours_mode(modes: list[str]) -> Optional[str]:
    """The mode whose numbers stand for "ours": cold when it ran, else the first non-reference one."""
    return "cold" if "cold" in modes else (modes[0] if modes and modes[0] != "reference" else None)


def _with_impl(values: dict[str, list[float]], impl: Callable[[str], str]) -> dict:
    """{mode: stats + which binary ran} for one plugin/command (and level) cell."""
    return {m: dict(stats(v), impl=impl(m)) for m, v in values.items()}


def _add_ratio(cells: dict, ours: Optional[str]) -> None:
    if ours in cells and "reference" in cells:
        cells["ratio"] = median_ratio(cells[ours], cells["reference"])


def summarize(bench: Any, elapsed: float) -> dict:
    samples = [s for s in bench.samples if s.code == 0]
    modes = list(bench.modes)
    ours = ours_mode(modes)

    def pick(**kw: Any) -> list[float]:
        return [s.seconds for s in samples if all(getattr(s, k) == v for k, v in kw.items())]

    def impl_of(plugin: str) -> Callable[[str], str]:
        return lambda m: bench.modes[m].provenance.get(plugin, "")

    out: dict[str, Any] = {
        "schema": SCHEMA,
        "when": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "machine": {"cpus": os.cpu_count(), "kernel": platform.release(), "python": platform.python_version(),
                    "loadavg_start_end": getattr(bench, "loadavg", None)},
        "options": {k: (list(v) if isinstance(v, tuple) else v) for k, v in vars(bench.o).items()},
        "elapsed_seconds": elapsed,
        "modes": {m.name: {"bin_dirs": m.bin_dirs, "plugins": m.provenance, "skipped": m.skipped}
                  for m in bench.modes.values()},
        "floor": stats(pick(phase="floor", mode="python")),
        "shim_floor": stats(pick(phase="floor", mode="shim")),
        "executables": getattr(bench, "executables", ""),
        "notes": list(bench.notes),
        "errors": bench.errors,
    }
    out["version"] = _version(bench, modes, pick)
    out["chain"] = _per_plugin(samples, "chain", impl_of, ours)
    out["chain_totals"] = _chain_totals(bench, modes, ours)
    ref_types = set(bench.modes["reference"].provenance) if "reference" in bench.modes else set()
    out["status"] = _status(getattr(bench, "status_sweeps", []), ours, ref_types)
    out["parallel"] = _parallel(bench, ours)
    out["parallel_pods"] = bench.o.parallel
    out["growth"] = _growth(samples, impl_of, ours)
    out["targets"] = targets(out, ours)
    return out


def _version(bench: Any, modes: list[str], pick: Callable[..., list[float]]) -> dict:
    """VERSION execs per plugin and mode: pure start-up cost."""
    version: dict[str, dict] = {}
    for m in modes:
        for ptype in sorted(bench.modes[m].provenance):
            st = stats(pick(phase="floor", mode=m, plugin=ptype, command="VERSION"))
            if st["n"]:
                version.setdefault(ptype, {})[m] = st
    return version


def _per_plugin(samples: list, phase: str, impl_of: Callable[[str], Callable[[str], str]], ours: Optional[str]) -> dict:
    """plugin -> command -> {mode: cell, "ratio": ours/reference} for one phase's samples."""
    per: dict[str, dict] = {}
    for s in samples:
        if s.phase == phase:
            per.setdefault(s.plugin, {}).setdefault(s.command, {}).setdefault(s.mode, []).append(s.seconds)
    result = {p: {c: _with_impl(cm, impl_of(p)) for c, cm in pc.items()} for p, pc in per.items()}
    for pc in result.values():
        for cells in pc.values():
            _add_ratio(cells, ours)
    return result


def _growth(samples: list, impl_of: Callable[[str], Callable[[str], str]], ours: Optional[str]) -> dict:
    """plugin -> command -> pods present (a string key) -> {mode: cell, "ratio": ...}."""
    growth: dict[str, dict] = {}
    for s in samples:
        if s.phase == "growth":
            (growth.setdefault(s.plugin, {}).setdefault(s.command, {}).setdefault(str(s.present), {})
             .setdefault(s.mode, []).append(s.seconds))
    result = {p: {c: {lvl: _with_impl(mv, impl_of(p)) for lvl, mv in lv.items()} for c, lv in pc.items()}
              for p, pc in growth.items()}
    for pc in result.values():
        for lv in pc.values():
            for cells in lv.values():
                _add_ratio(cells, ours)
    return result


def _chain_totals(bench: Any, modes: list[str], ours: Optional[str]) -> dict:
    """Per-pod chain totals per mode: "all" its plugins, and "like_for_like" -- only the plugin types
    the reference chain has, so a plugin the reference lacks does not count against us."""
    ref_types = set(bench.modes["reference"].provenance) if "reference" in bench.modes else set()
    totals: dict[str, dict] = {}
    for m in modes:
        per_pod: dict[int, dict[str, float]] = {}
        like: dict[int, dict[str, float]] = {}
        for t in bench.chain_totals:
            if t["mode"] != m or not t["ok"]:
                continue
            per_pod.setdefault(t["pod"], {})[t["command"]] = t["seconds"]
            like.setdefault(t["pod"], {})[t["command"]] = sum(
                v for k, v in t["plugins"].items() if not ref_types or k in ref_types)
        totals[m] = {key: _add_del(table) for key, table in (("all", per_pod), ("like_for_like", like))}
    for key, mode in (("ratio", ours), ("ratio_warm", "warm")):
        if mode in totals and "reference" in totals:
            totals[key] = {c: median_ratio(totals[mode]["like_for_like"][c], totals["reference"]["all"][c])
                           for c in COMMANDS}
    return totals


def _add_del(table: dict[int, dict[str, float]]) -> dict:
    return {
        "ADD": stats([v["ADD"] for v in table.values() if "ADD" in v]),
        "DEL": stats([v["DEL"] for v in table.values() if "DEL" in v]),
        "ADD+DEL": stats([v["ADD"] + v["DEL"] for v in table.values() if "ADD" in v and "DEL" in v]),
    }


def _parallel(bench: Any, ours: Optional[str]) -> dict:
    """mode -> command -> wall time per batch; batches with a failure are left out."""
    par: dict[str, dict] = {}
    for row in bench.parallel:
        if not row["failed"]:
            par.setdefault(row["mode"], {}).setdefault(row["command"], []).append(row["wall_seconds"])
    result: dict[str, dict] = {m: {c: stats(v) for c, v in cm.items()} for m, cm in par.items()}
    if ours in par and "reference" in par:
        result["ratio"] = {c: median_ratio(result[ours].get(c, {}), result["reference"].get(c, {})) for c in ("ADD", "DEL")}
    return result


def _status(rows: list[dict], ours: Optional[str], ref_types: set[str]) -> dict:
    """mode -> the STATUS sweep's cost: per sweep (the whole chain; "like_for_like" only the plugin
    types the reference chain has; "later_sweeps" without the first), per plugin, and which plugins
    failed it; plus like-for-like ours/reference and warm/reference ratios of the medians.  Every
    exec counts, failed or not: a node pays for it either way."""
    per_mode: dict[str, list[dict]] = {}
    for row in rows:
        per_mode.setdefault(row["mode"], []).append(row)
    result: dict[str, Any] = {}
    for mode, sweeps in per_mode.items():
        sweeps = sorted(sweeps, key=lambda r: r["sweep"])
        plugins: dict[str, list[float]] = {}
        failed: dict[str, str] = {}
        for row in sweeps:
            for ptype, seconds in row["plugins"].items():
                plugins.setdefault(ptype, []).append(seconds)
            failed.update(row["failed"])
        result[mode] = {
            "sweep": stats([r["seconds"] for r in sweeps]),
            "first_sweep_ms": sweeps[0]["seconds"] * 1000,
            "later_sweeps": stats([r["seconds"] for r in sweeps[1:]]),
            "like_for_like": stats([sum(s for p, s in r["plugins"].items() if not ref_types or p in ref_types)
                                    for r in sweeps]),
            "plugins": {p: stats(v) for p, v in plugins.items()},
            "failed": failed,
        }
    for key, which in (("ratio", ours), ("ratio_warm", "warm")):
        if which in result and "reference" in result:
            result[key] = median_ratio(result[which]["like_for_like"], result["reference"]["sweep"])
    return result
