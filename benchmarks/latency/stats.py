"""The bench's verdicts: ratios of cells and the acceptance targets.

Pure functions over the summary dict, whose cells :func:`cnichain.benchmarks.measure.stats` made
(milliseconds: ``median_ms``, ``p95_ms``, ...); ratios are always ours / reference on medians, so
below 1.0 means we are faster.
"""

from __future__ import annotations

from typing import Optional

# portmap, ours/reference: no slower on an empty node, at most half the time at the top growth level.
PORTMAP_LIMITS = (1.0, 0.5)
FLOOR_LIMIT = 2.5  # host-local and tuning (sysctls only): at most this many bare interpreter starts
CHAIN_LIMIT = 3.0  # the cold chain ADD+DEL per pod, like for like, against the reference
# warm (node agent + shim) against the reference: chain totals per pod, every plugin's ADD and DEL
# median (bandwidth, host-local and tuning included), VERSION, a batch of pods in parallel (ADD
# and DEL), and a STATUS sweep of the chain.
WARM_CHAIN_LIMITS = {"ADD+DEL": 0.4, "ADD": 0.6}
WARM_PLUGIN_LIMIT = 1.0
WARM_VERSION_LIMIT = 1.5
WARM_PARALLEL_LIMITS = {"ADD": 0.75, "DEL": 0.5}
WARM_STATUS_LIMIT = 1.0
# warm, N pods' chains at once with the agent under the shipped limits: batch wall time against the
# reference, the agent's cgroup peak as a share of its limit, OOM kills, and the idle footprint.
WARM_STORM_LIMITS = {"ADD": 0.6, "DEL": 0.5}
WARM_STORM_CPU_LIMIT = 0.25  # the node's CPU per pod (ADD + DEL), kernel work included: issue 38
STORM_PEAK_SHARE = 0.5
IDLE_LIMIT_MIB = 48.0


def ratio(ours: Optional[float], ref: Optional[float]) -> Optional[float]:
    """ours / ref, or None when either is missing (or the reference is zero)."""
    if ours is None or not ref:
        return None
    return ours / ref


def median_ms(cell: Optional[dict]) -> Optional[float]:
    """The median of a :func:`stats` cell, None for an empty or missing one."""
    return cell.get("median_ms") if cell else None


def median_ratio(ours: Optional[dict], ref: Optional[dict]) -> Optional[float]:
    """The ratio of two cells' medians."""
    return ratio(median_ms(ours), median_ms(ref))


def targets(out: dict, ours: Optional[str], ref: str = "reference", name_ref: bool = False) -> list[dict]:
    """The issue's acceptance targets against reference mode ``ref``, each with the measured value
    and whether it is met (``name_ref``: the reference's mode name ends each target's name, for
    runs with several references).

    ``met`` is None when the value could not be measured.  A target is only stated for cells where
    our own binary ran (not a reference stand-in), so a fallback can never "meet" one.
    """
    rows: list[dict] = []
    if not ours:
        return rows
    floor = median_ms(out.get("floor", {}))
    tag = f" [{ref}]" if name_ref else ""

    def add(name: str, value: Optional[float], limit: float, unit: str, against_ref: bool = True) -> None:
        rows.append({"target": name + (tag if against_ref else ""), "value": value, "limit": limit, "unit": unit,
                     "reference": ref if against_ref else None, "met": None if value is None else value <= limit})

    g = out.get("growth", {})
    levels = sorted({int(lvl) for pc in g.values() for lv in pc.values() for lvl in lv})

    def real(cells: dict) -> bool:
        return (cells.get(ours) or {}).get("impl") == "ours"

    for c in ("ADD", "DEL"):
        lv = {k: v for k, v in g.get("portmap", {}).get(c, {}).items() if real(v) and ref in v}
        if "0" in lv:
            add(f"portmap {c} median, 0 pods: ours/reference", median_ratio(lv["0"][ours], lv["0"][ref]),
                PORTMAP_LIMITS[0], "x")
        top = str(max(levels)) if levels else None
        if top and top != "0" and top in lv:
            add(f"portmap {c} median, {top} pods: ours/reference", median_ratio(lv[top][ours], lv[top][ref]),
                PORTMAP_LIMITS[1], "x")
    if not name_ref or ref == (out.get("references") or [ref])[0]:  # against the floor: once per run
        for c in ("ADD", "DEL"):
            lv = {k: v for k, v in g.get("host-local", {}).get(c, {}).items() if real(v)}
            if "0" in lv and floor:
                add(f"host-local {c} median, 0 pods: ours/python floor",
                    ratio(median_ms(lv["0"].get(ours, {})), floor), FLOOR_LIMIT, "x", against_ref=False)
            tun = out.get("chain", {}).get("tuning", {}).get(c, {})
            if ours in tun and floor and tun[ours].get("impl") == "ours":
                add(f"tuning (sysctls only) {c} median: ours/python floor", ratio(median_ms(tun[ours]), floor),
                    FLOOR_LIMIT, "x", against_ref=False)
    tot = out.get("chain_totals", {})
    if ours in tot and ref in tot:
        add("chain ADD+DEL per pod median: ours/reference (like for like)",
            median_ratio(tot[ours]["like_for_like"]["ADD+DEL"], tot[ref]["all"]["ADD+DEL"]), CHAIN_LIMIT, "x")
    rows += [dict(r, target=r["target"] + tag, reference=ref) for r in warm_targets(out, ref)]
    return rows


def warm_targets(out: dict, ref: str = "reference") -> list[dict]:
    """The warm path's targets (warm/reference on medians) against ``ref``, when both modes ran."""
    rows: list[dict] = []

    def add(name: str, value: Optional[float], limit: float) -> None:
        rows.append({"target": name, "value": value, "limit": limit, "unit": "x",
                     "met": None if value is None else value <= limit})

    def warm_ratio(cells: dict) -> Optional[float]:
        if (cells.get("warm") or {}).get("impl") not in ("ours", None):
            return None  # a reference stand-in never meets a target
        return median_ratio(cells.get("warm"), cells.get(ref))

    tot = out.get("chain_totals", {})
    if "warm" in tot and ref in tot:
        for c, limit in WARM_CHAIN_LIMITS.items():
            add(f"warm chain {c} per pod median: warm/reference",
                median_ratio(tot["warm"]["like_for_like"][c], tot[ref]["all"][c]), limit)
    per_plugin = dict(out.get("chain", {}))
    if "host-local" not in per_plugin:  # bridge's delegate is not timed alone: growth at 0 pods is
        per_plugin["host-local"] = {c: lv["0"] for c, lv in out.get("growth", {}).get("host-local", {}).items()
                                    if "0" in lv}
    for plugin, pc in sorted(per_plugin.items()):
        for c in ("ADD", "DEL"):
            cells = pc.get(c, {})
            if "warm" in cells and ref in cells:
                add(f"warm {plugin} {c} median: warm/reference", warm_ratio(cells), WARM_PLUGIN_LIMIT)
    for plugin, cells in sorted(out.get("version", {}).items()):
        if "warm" in cells and ref in cells:
            add(f"warm {plugin} VERSION median: warm/reference", median_ratio(cells["warm"], cells[ref]),
                WARM_VERSION_LIMIT)
    par = out.get("parallel", {})
    for c, limit in WARM_PARALLEL_LIMITS.items():
        if c in par.get("warm", {}) and c in par.get(ref, {}):
            add(f"warm {out.get('parallel_pods')} pods in parallel {c}: warm/reference",
                median_ratio(par["warm"][c], par[ref][c]), limit)
    for width, cells in sorted(out.get("storm", {}).items(), key=lambda kv: int(kv[0])):
        for c, limit in WARM_STORM_LIMITS.items():
            if c in cells.get("warm", {}) and c in cells.get(ref, {}):
                add(f"warm {width} pods at once {c}: warm/reference",
                    median_ratio(cells["warm"][c], cells[ref][c]), limit)
        cpu = (cells.get("cpu_ratios") or {}).get(f"warm/{ref}", {}).get("node_pod")
        if cpu is not None:
            add(f"warm {width} pods at once: node CPU per pod (ADD+DEL), warm/reference", cpu, WARM_STORM_CPU_LIMIT)
    status = out.get("status", {})
    if "warm" in status and ref in status:
        add("warm STATUS sweep median (like for like): warm/reference",
            median_ratio(status["warm"]["like_for_like"], status[ref]["sweep"]), WARM_STATUS_LIMIT)
    return rows


def agent_targets(out: dict) -> list[dict]:
    """The warm agent's own bounds (no reference involved): in each storm batch no OOM kill and a
    cgroup peak within :data:`STORM_PEAK_SHARE` of its limit; idle at most :data:`IDLE_LIMIT_MIB`."""
    rows: list[dict] = []

    def add(name: str, value: Optional[float], limit: float, unit: str) -> None:
        rows.append({"target": name, "value": value, "limit": limit, "unit": unit, "reference": None,
                     "met": None if value is None else value <= limit})

    for width, cells in sorted(out.get("storm", {}).items(), key=lambda kv: int(kv[0])):
        for c, view in sorted(cells.get("agent", {}).items()):
            if view.get("limit_mib"):
                add(f"warm agent {width} pods at once {c}: cgroup peak / limit", view["peak_mib"] / view["limit_mib"],
                    STORM_PEAK_SHARE, "x")
            add(f"warm agent {width} pods at once {c}: OOM kills", view.get("oom_kills"), 0, "")
    idle = out.get("agent_idle", {})
    if idle.get("usage_mib") is not None:
        add("warm agent idle after start: cgroup MiB", idle["usage_mib"], IDLE_LIMIT_MIB, "MiB")
    return rows


def verdict(met: Optional[bool]) -> str:
    return "n/a" if met is None else ("met" if met else "MISSED")
