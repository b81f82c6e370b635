"""The bench's result document (schema ``cnichain-bench/2``): every sample reduced to statistics.

Pure apart from reading the clock and the machine's identity for the header: it takes what the
phases recorded on a :class:`~cnichain.benchmarks.latency.session.Bench` (or anything with the same
attributes) and returns a JSON-ready dict that the table, the chart and the targets are built from.
Only successful execs count; failures are listed under ``errors``.

A run may compare against several references (``references``: their mode names, the first is the
primary).  Wherever a cell has numbers of ours and of references, ``ratios`` holds one ratio of
medians per pair, keyed ``"<ours mode>/<reference mode>"`` (``cold/ref-1.9.1-nft``); ``ratio``
(and ``ratio_warm`` where it was) is ours against the primary reference, as in schema 1.
"""

from __future__ import annotations

import os
import platform
import time
from typing import Any, Callable, Optional

from cnichain.benchmarks.latency.stats import agent_targets, median_ratio, ratio, targets
from cnichain.benchmarks.measure import stats

SCHEMA = "cnichain-bench/2"
COMMANDS = ("ADD", "DEL", "ADD+DEL")


def ours_mode(modes: list[str], refs: tuple[str, ...] = ("reference",)) -> Optional[str]:
    """The mode whose numbers stand for "ours": cold when it ran, else the first mode when it is not
    a reference."""
    return "cold" if "cold" in modes else (modes[0] if modes and modes[0] not in refs else None)


def reference_names(bench: Any) -> list[str]:
    """The reference modes of ``bench``, in order (a mode without a kind is one when named "reference")."""
    return [name for name, m in bench.modes.items()
            if getattr(m, "kind", "reference" if name == "reference" else "ours") == "reference"]


class Pairs:
    """Which ours/reference pairs a run has: ours modes (cold, warm) x reference modes."""

    def __init__(self, ours: list[str], refs: list[str], primary_ours: Optional[str]) -> None:
        self.ours, self.refs, self.primary_ours = ours, refs, primary_ours
        self.primary = refs[0] if refs else None

    def each(self) -> list[tuple[str, str, str]]:
        return [(f"{o}/{r}", o, r) for o in self.ours for r in self.refs]

    def add(self, cells: dict, ratio_of: Callable[[Any, Any], Any] = median_ratio) -> None:
        """``ratios`` per pair present in ``cells``, and ``ratio``: primary ours / primary reference."""
        ratios = {key: ratio_of(cells[o], cells[r]) for key, o, r in self.each() if o in cells and r in cells}
        if ratios:
            cells["ratios"] = ratios
        if self.primary_ours in cells and self.primary in cells:
            cells["ratio"] = ratio_of(cells[self.primary_ours], cells[self.primary])

    def headline(self, result: dict, ratios: dict) -> None:
        """``ratio`` (primary ours) and ``ratio_warm`` against the primary reference, picked from
        ``ratios``, for the results whose ratios are computed on their own terms."""
        for key, mode in (("ratio", self.primary_ours), ("ratio_warm", "warm")):
            if mode in result and self.primary in result:
                result[key] = ratios[f"{mode}/{self.primary}"]


def _with_impl(values: dict[str, list[float]], impl: Callable[[str], str]) -> dict:
    """{mode: stats + which binary ran} for one plugin/command (and level) cell."""
    return {m: dict(stats(v), impl=impl(m)) for m, v in values.items()}


def summarize(bench: Any, elapsed: float) -> dict:
    samples = [s for s in bench.samples if s.code == 0]
    modes = list(bench.modes)
    refs = reference_names(bench)
    ours = ours_mode(modes, tuple(refs))
    pairs = Pairs([m for m in modes if m not in refs], refs, ours)

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
        "modes": {m.name: _mode_info(m, m.name in refs) for m in bench.modes.values()},
        "references": refs,
        "floor": stats(pick(phase="floor", mode="python")),
        "shim_floor": stats(pick(phase="floor", mode="shim")),
        "executables": getattr(bench, "executables", ""),
        "notes": list(bench.notes),
        "errors": bench.errors,
    }
    out["version"] = _version(bench, modes, pick)
    for cells in out["version"].values():
        pairs.add(cells)
    ref_types = {p for r in refs for p in bench.modes[r].provenance}
    out["chain"] = _per_plugin(samples, "chain", impl_of, pairs)
    out["chain_totals"] = _chain_totals(bench, modes, pairs, ref_types)
    out["status"] = _status(getattr(bench, "status_sweeps", []), pairs, ref_types)
    out["parallel"] = _parallel(bench, pairs)
    out["parallel_pods"] = bench.o.parallel
    out["storm"] = _storm(getattr(bench, "storm", []), pairs)
    out["agent_idle"] = dict(getattr(bench, "agent_idle", {}) or {})
    out["growth"] = _growth(samples, impl_of, pairs)
    out["pods"] = _pods(getattr(bench, "pod_rows", []), pairs, getattr(bench, "pods_runtime", {}))
    out["targets"] = [row for ref in refs for row in targets(out, ours, ref, len(refs) > 1)] if refs else []
    out["targets"] += agent_targets(out)
    return out


def _mode_info(mode: Any, is_reference: bool) -> dict:
    info = {"bin_dirs": mode.bin_dirs, "plugins": mode.provenance, "skipped": mode.skipped,
            "kind": "reference" if is_reference else "ours"}
    if is_reference:
        info.update(reference=getattr(mode, "reference", "") or mode.name, version=getattr(mode, "version", ""),
                    portmap_backend=getattr(mode, "portmap_backend", None))
    return info


def _version(bench: Any, modes: list[str], pick: Callable[..., list[float]]) -> dict:
    """VERSION execs per plugin and mode: pure start-up cost."""
    version: dict[str, dict] = {}
    for m in modes:
        for ptype in sorted(bench.modes[m].provenance):
            st = stats(pick(phase="floor", mode=m, plugin=ptype, command="VERSION"))
            if st["n"]:
                version.setdefault(ptype, {})[m] = st
    return version


def _per_plugin(samples: list, phase: str, impl_of: Callable[[str], Callable[[str], str]], pairs: Pairs) -> dict:
    """plugin -> command -> {mode: cell, "ratio": ours/reference} for one phase's samples."""
    per: dict[str, dict] = {}
    for s in samples:
        if s.phase == phase:
            per.setdefault(s.plugin, {}).setdefault(s.command, {}).setdefault(s.mode, []).append(s.seconds)
    result = {p: {c: _with_impl(cm, impl_of(p)) for c, cm in pc.items()} for p, pc in per.items()}
    for pc in result.values():
        for cells in pc.values():
            pairs.add(cells)
    return result


def _growth(samples: list, impl_of: Callable[[str], Callable[[str], str]], pairs: Pairs) -> dict:
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
                pairs.add(cells)
    return result


def _chain_totals(bench: Any, modes: list[str], pairs: Pairs, ref_types: set[str]) -> dict:
    """Per-pod chain totals per mode: "all" its plugins, and "like_for_like" -- only the plugin types
    a reference chain has, so a plugin no reference has does not count against us; ratios compare
    ours like for like with the reference's whole chain."""
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
        if not per_pod:
            continue  # the chain phase did not run (or every pod of this mode failed)
        totals[m] = {key: _add_del(table) for key, table in (("all", per_pod), ("like_for_like", like))}
    def per_command(o: str, r: str) -> dict:
        return {c: median_ratio(totals[o]["like_for_like"][c], totals[r]["all"][c]) for c in COMMANDS}

    ratios = {key: per_command(o, r) for key, o, r in pairs.each() if o in totals and r in totals}
    if ratios:
        totals["ratios"] = ratios
    pairs.headline(totals, ratios)
    return totals


def _add_del(table: dict[int, dict[str, float]]) -> dict:
    return {
        "ADD": stats([v["ADD"] for v in table.values() if "ADD" in v]),
        "DEL": stats([v["DEL"] for v in table.values() if "DEL" in v]),
        "ADD+DEL": stats([v["ADD"] + v["DEL"] for v in table.values() if "ADD" in v and "DEL" in v]),
    }


def _parallel(bench: Any, pairs: Pairs) -> dict:
    """mode -> command -> wall time per batch; batches with a failure are left out."""
    par: dict[str, dict] = {}
    for row in bench.parallel:
        if not row["failed"]:
            par.setdefault(row["mode"], {}).setdefault(row["command"], []).append(row["wall_seconds"])
    result: dict[str, dict] = {m: {c: stats(v) for c, v in cm.items()} for m, cm in par.items()}
    pairs.add(result, lambda o, r: {c: median_ratio(o.get(c, {}), r.get(c, {})) for c in ("ADD", "DEL")})
    return result


def _storm(rows: list[dict], pairs: Pairs) -> dict:
    """width -> mode -> command -> the batch's wall time (a failed batch is left out, its count
    kept), plus the warm agent's cgroup and queue per batch, and ours/reference ratios per pair."""
    result: dict[str, dict] = {}
    for row in rows:
        cells = result.setdefault(str(row["pods"]), {})
        cell = cells.setdefault(row["mode"], {})
        if row["failed"]:
            cell.setdefault("failed", {})[row["command"]] = row["failed"]
        else:
            cell[row["command"]] = stats([row["wall_seconds"]])
        if row.get("agent"):
            cells.setdefault("agent", {})[row["command"]] = row["agent"]
        if "cpu_seconds" in row and not row["failed"]:
            per_pod = 1000 / row["pods"]
            cells.setdefault("cpu_per_pod_ms", {}).setdefault(row["mode"], {})[row["command"]] = row["cpu_seconds"] * per_pod
            if "runtime_cpu_seconds" in row:
                split = {"runtime": row["runtime_cpu_seconds"] * per_pod}
                if "agent_cpu_seconds" in row:
                    split["agent"] = row["agent_cpu_seconds"] * per_pod
                split["rest"] = row["cpu_seconds"] * per_pod - sum(split.values())
                cells.setdefault("cpu_split_ms", {}).setdefault(row["mode"], {})[row["command"]] = split
    for cells in result.values():
        pairs.add(cells, lambda o, r: {c: median_ratio(o.get(c, {}), r.get(c, {})) for c in ("ADD", "DEL")})
        _cpu_ratios(cells, pairs)
    return result


def _cpu_ratios(cells: dict, pairs: Pairs) -> None:
    """ours/reference of the node's CPU per pod, per command and for ADD + DEL ("pod"), as the node
    sees it and without the runtime's own share (the same driver in every mode)."""
    node, split = cells.get("cpu_per_pod_ms") or {}, cells.get("cpu_split_ms") or {}

    def plugins_only(mode: str, command: str) -> Optional[float]:
        cpu, runtime = node.get(mode, {}).get(command), split.get(mode, {}).get(command, {}).get("runtime")
        return None if cpu is None or runtime is None else cpu - runtime

    found: dict[str, dict] = {}
    for key, o, r in pairs.each():
        if o not in node or r not in node:
            continue
        cell: dict[str, Optional[float]] = {}
        for name, of in (("node", lambda m, c: node[m].get(c)), ("without_runtime", plugins_only)):
            for command in ("ADD", "DEL"):
                cell[f"{name}_{command}"] = ratio(of(o, command), of(r, command))
            both = [(of(o, c), of(r, c)) for c in ("ADD", "DEL")]
            if all(a is not None and b is not None for a, b in both):
                cell[f"{name}_pod"] = ratio(sum(a for a, _ in both), sum(b for _, b in both))  # type: ignore[misc]
        found[key] = cell
    if found:
        cells["cpu_ratios"] = found


def _status(rows: list[dict], pairs: Pairs, ref_types: set[str]) -> dict:
    """mode -> the STATUS sweep's cost: per sweep (the whole chain; "like_for_like" only the plugin
    types a reference chain has; "later_sweeps" without the first), per plugin, and which plugins
    failed it; plus like-for-like ours/reference ratios of the medians per pair.  Every exec
    counts, failed or not: a node pays for it either way."""
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
    ratios = {key: median_ratio(result[o]["like_for_like"], result[r]["sweep"])
              for key, o, r in pairs.each() if o in result and r in result}
    if ratios:
        result["ratios"] = ratios
    pairs.headline(result, ratios)
    return result


POD_STEPS = ("run", "stop_remove", "total")


def _pods(rows: list[dict], pairs: Pairs, runtime: dict) -> dict:
    """The pods phase: mode -> {run, stop_remove, total} per pod (ms statistics), pods that failed
    left out; ``ratios`` per pair and step; ``runtime`` says which containerd ran them."""
    if not rows and not runtime:
        return {}
    per: dict[str, dict[str, list[float]]] = {}
    for row in rows:
        if row["ok"]:
            steps = per.setdefault(row["mode"], {s: [] for s in POD_STEPS})
            for step in POD_STEPS:
                steps[step].append(row[step])
    result: dict[str, Any] = {m: {s: stats(v) for s, v in steps.items()} for m, steps in per.items()}
    pairs.add(result, lambda o, r: {s: median_ratio(o[s], r[s]) for s in POD_STEPS})
    result["runtime"] = runtime
    result["failed"] = sum(1 for row in rows if not row["ok"])
    return result
