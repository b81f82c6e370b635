"""The summary as plain-text tables for a terminal (and the ``bench-<time>.txt`` file).

Pure: a summary dict in, text out.  Columns are ours ("cold"), warm and each reference mode, each
with median and p95 in ms, then one ratio column per ours/reference pair that ran, headed by two
lines (``ours/`` over ``ref`` with the single reference; ``ours/`` over ``1.9.1-nft`` and the like
with several: see :func:`label`).
"""

from __future__ import annotations

from typing import Optional

from cnichain.plugins import registry

from cnichain.benchmarks.latency.stats import median_ratio, verdict

LABEL = {"cold": "ours", "warm": "warm", "reference": "ref"}
CHAIN_ORDER = list(registry.CHAIN_ORDER)


def label(mode: str) -> str:
    """A mode's column label: ours, warm, ref; a named reference without its ``ref-`` prefix and
    with ``-iptables`` as ``-ipt`` (``ref-1.9.1-iptables`` -> ``1.9.1-ipt``)."""
    if mode in LABEL:
        return LABEL[mode]
    short = mode[4:] if mode.startswith("ref-") and len(mode) > 4 else mode
    return short[: -len("iptables")] + "ipt" if short.endswith("-iptables") else short


def _ms(v: Optional[float]) -> str:
    return "-" if v is None else (f"{v:.1f}" if v < 100 else f"{v:.0f}")


def _x(v: Optional[float]) -> str:
    return "-" if v is None else f"{v:.2f}x"


def cpu_lines(cells: dict, cols: list[str]) -> list[str]:
    """A storm width's CPU per pod: the node's, its split, and ours/reference for the whole pod."""
    node, split = cells.get("cpu_per_pod_ms") or {}, cells.get("cpu_split_ms") or {}
    lines = []
    for m in cols:
        if m not in node:
            continue
        parts = []
        for c in ("ADD", "DEL"):
            share = split.get(m, {}).get(c) or {}
            detail = ", ".join(f"{k} {v:.1f}" for k, v in share.items())
            parts.append(f"{c} {node[m].get(c, 0):.1f}" + (f" ({detail})" if detail else ""))
        lines.append(f"  {label(m)}: node CPU per pod (ms) " + "; ".join(parts))
    for key, r in sorted((cells.get("cpu_ratios") or {}).items()):
        if r.get("node_pod") is not None:
            lines.append(f"  CPU per pod {key}: {r['node_pod']:.2f}x as the node sees it, "
                         + (f"{r['without_runtime_pod']:.2f}x without the runtime's own share"
                            if r.get("without_runtime_pod") is not None else "runtime's share unknown"))
    return lines


def render_table(out: dict) -> str:
    """The summary as plain-text tables for a terminal."""
    lines: list[str] = []
    modes = [m for m in out.get("modes", {})]
    ours = "cold" if "cold" in modes else None
    floor = out.get("floor", {})
    lines.append(f"cnichain bench  {out['when']}  cpus={out['machine']['cpus']}  kernel={out['machine']['kernel']}  "
                 f"python={out['machine']['python']}")
    if floor.get("n"):
        lines.append(f"interpreter floor (python -I -S -c pass): median {_ms(floor['median_ms'])} ms  p95 {_ms(floor['p95_ms'])} ms")
    shim_floor = out.get("shim_floor", {})
    if shim_floor.get("n"):
        lines.append(f"native shim bare exec (cnichain-shim): median {_ms(shim_floor['median_ms'])} ms  "
                     f"p95 {_ms(shim_floor['p95_ms'])} ms")
    if out.get("executables"):
        lines.append(f"our plugin executables: {out['executables']}")
    for m, info in out.get("modes", {}).items():
        is_ref = info.get("kind", "reference" if m == "reference" else "ours") == "reference"
        fall = [p for p, w in info["plugins"].items() if w == "reference" and not is_ref]
        what = ""
        if is_ref and (info.get("version") or info.get("portmap_backend")):
            what = f" [{info.get('version') or 'version unknown'}, portmap {info.get('portmap_backend') or 'default backend'}]"
        lines.append(f"mode {m}{what}: {', '.join(sorted(info['plugins']))}"
                     + (f"  (reference fallback: {', '.join(fall)})" if fall else "")
                     + (f"  (left out: {', '.join(info['skipped'])})" if info["skipped"] else ""))
    refs = [m for m in out.get("references", ["reference"]) if m in modes]
    ours_cols = [m for m in ("cold", "warm") if m in modes]
    cols = ours_cols + refs
    pair_cols = [(o, r) for o in ours_cols for r in refs]
    width = max([8] + [(len(label(m)) + 3) // 2 for m in cols])
    rwidth = max([9] + [len(label(m)) + 2 for m in cols])

    def header(title: str, first: str) -> None:
        """Two lines: each mode's label over its med and p95 columns, each pair as ``ours/`` over
        the reference's label."""
        lines.append("")
        lines.append(title)
        lines.append(f"  {'':<28}" + "".join(f"{label(m):>{2 * width}}" for m in cols)
                     + "".join(f"{label(o) + '/':>{rwidth}}" for o, _ in pair_cols))
        lines.append(f"  {first:<28}" + f"{'med':>{width}}{'p95':>{width}}" * len(cols)
                     + "".join(f"{label(r):>{rwidth}}" for _, r in pair_cols))

    def row(text_label: str, cells: dict, ratios: Optional[dict] = None) -> None:
        """One line: each mode's median and p95, then each pair's ratio (``ratios`` keyed "o/r", or
        computed from the medians when not given)."""
        text = f"  {text_label:<28}"
        for m in cols:
            st = cells.get(m) or {}
            text += f"{_ms(st.get('median_ms')):>{width}}{_ms(st.get('p95_ms')):>{width}}"
        for o, r in pair_cols:
            value = (ratios or {}).get(f"{o}/{r}") if ratios is not None else median_ratio(cells.get(o), cells.get(r))
            text += f"{_x(value):>{rwidth}}"
        lines.append(text)

    def ratio_line(text_label: str, ratios: dict) -> None:
        """Only the ratio columns (for lines whose cells are printed elsewhere)."""
        lines.append(f"  {text_label:<28}" + " " * (2 * width * len(cols))
                     + "".join(f"{_x(ratios.get(f'{o}/{r}')):>{rwidth}}" for o, r in pair_cols))

    if out.get("version"):
        header("VERSION exec (ms): start-up cost only", "plugin")
        for p, cells in sorted(out["version"].items()):
            row(p, cells)
    if out.get("chain"):
        header("chain, per plugin and command (ms, exec to exit; bridge includes its host-local exec)", "plugin command")
        for p in sorted(out["chain"], key=lambda x: (CHAIN_ORDER.index(x) if x in CHAIN_ORDER else 99, x)):
            for c in ("ADD", "DEL", "CHECK"):
                cells = out["chain"][p].get(c)
                if cells:
                    impl = (cells.get(ours or "") or {}).get("impl")
                    row(f"{p} {c}" + (" [ref binary]" if impl == "reference" else ""), cells, cells.get("ratios", {}))
    tot = out.get("chain_totals", {})
    if any(m in tot for m in cols):
        header("chain totals per pod (ms); ours like-for-like = without plugins no reference has", "")
        for c in ("ADD", "DEL", "ADD+DEL"):
            cells = {m: tot[m]["like_for_like" if m not in refs else "all"][c] for m in cols if m in tot}
            row(f"{c} (like for like)", cells, {k: v.get(c) for k, v in tot.get("ratios", {}).items()})
            if ours in tot:
                lines.append(f"  {c + ' (ours, whole chain)':<28}{_ms(tot[ours]['all'][c].get('median_ms')):>{width}}"
                             f"{_ms(tot[ours]['all'][c].get('p95_ms')):>{width}}")
    status = out.get("status", {})
    if any(m in status for m in cols):
        header("STATUS sweep: every plugin of the chain at 1.1.0, as containerd 2.1 polls every ~5 s (ms)", "")
        row("per sweep (like for like)", {m: status.get(m, {}).get("like_for_like" if m not in refs else "sweep")
                                          for m in cols}, status.get("ratios", {}))
        row("per sweep (whole chain)", {m: status.get(m, {}).get("sweep") for m in cols})
        row("after the first sweep", {m: status.get(m, {}).get("later_sweeps") for m in cols})
        for m in cols:
            failed = status.get(m, {}).get("failed") or {}
            if failed:
                lines.append(f"  {label(m)} fails STATUS in: {', '.join(sorted(failed))} "
                             f"(counted anyway; first: {next(iter(sorted(failed.items())))[1][:80]})")
    par = out.get("parallel", {})
    if any(m in par for m in cols):
        header(f"{out.get('parallel_pods')} pods in parallel: wall time per batch (ms)", "batch")
        for c in ("ADD", "DEL"):
            row(f"{c} x{out.get('parallel_pods')}", {m: par.get(m, {}).get(c) for m in cols},
                {k: v.get(c) for k, v in par.get("ratios", {}).items()})
    storm = out.get("storm", {})
    for at_once, cells in sorted(storm.items(), key=lambda kv: int(kv[0])):
        if not any(m in cells for m in cols):
            continue
        header(f"{at_once} pods' chains at once: wall time per batch (ms)", "batch")
        for c in ("ADD", "DEL"):
            row(f"{c} x{at_once}", {m: cells.get(m, {}).get(c) for m in cols},
                {k: v.get(c) for k, v in cells.get("ratios", {}).items()})
        lines.extend(cpu_lines(cells, cols))
        for c, view in sorted(cells.get("agent", {}).items()):
            lines.append(f"  warm agent during {c}: cgroup peak {view.get('peak_mib', 0):.0f} of "
                         f"{view.get('limit_mib', 0):.0f} MiB, OOM kills {view.get('oom_kills')}, "
                         f"queue peak {view.get('queue_peak', 0):.0f}, waited {view.get('queued_total', 0):.0f} "
                         f"(total), workers at most {view.get('capacity', 0):.0f}, "
                         f"pool {view.get('pool_memory_mib', 0):.0f} MiB")
        for m in cols:
            if cells.get(m, {}).get("failed"):
                lines.append(f"  {label(m)}: failed pods per batch {cells[m]['failed']} (see errors)")
    idle = out.get("agent_idle", {})
    if idle:
        lines.append(f"  warm agent idle: cgroup {idle.get('usage_mib', 0):.1f} MiB, "
                     f"pool {idle.get('pool_memory_mib', 0):.1f} MiB")
    g = out.get("growth", {})
    if g:
        header("growth: latency with N other pods present (ms)", "plugin command @pods")
        for p in ("host-local", "portmap"):
            for c in ("ADD", "DEL"):
                for lvl, cells in sorted(g.get(p, {}).get(c, {}).items(), key=lambda kv: int(kv[0])):
                    fallback = (cells.get(ours or "") or {}).get("impl") == "reference"
                    row(f"{p} {c} @{lvl}" + (" [ref binary]" if fallback else ""), cells, cells.get("ratios", {}))
    pods = out.get("pods", {})
    if any(m in pods for m in cols):
        rt = pods.get("runtime", {})
        header(f"pods through {rt.get('name', 'the runtime')}'s CRI, per pod (ms): RunPodSandbox, "
               "StopPodSandbox + RemovePodSandbox", "step")
        for step, title in (("run", "RunPodSandbox"), ("stop_remove", "Stop+RemovePodSandbox"), ("total", "total")):
            row(title, {m: pods.get(m, {}).get(step) for m in cols},
                {k: v.get(step) for k, v in pods.get("ratios", {}).items()})
        if pods.get("failed"):
            lines.append(f"  {pods['failed']} pod(s) failed and are left out (see errors)")
    if out.get("targets"):
        lines.append("")
        lines.append("targets")
        for t in out["targets"]:
            unit = t.get("unit", "x")
            value = _x(t["value"]) if unit == "x" else ("-" if t["value"] is None else f"{t['value']:.4g}{unit}")
            lines.append(f"  {t['target']:<80} {value:>8}  (<= {t['limit']}{unit})  {verdict(t['met'])}")
    for n in out.get("notes", []):
        lines.append(f"note: {n}")
    if out.get("errors"):
        lines.append(f"errors: {len(out['errors'])} (first: {out['errors'][0]['mode']} {out['errors'][0]['what']}: {out['errors'][0]['error'][:200]})")
    return "\n".join(lines)

