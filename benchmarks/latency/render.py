"""The summary as plain-text tables for a terminal (and the ``bench-<time>.txt`` file).

Pure: a summary dict in, text out.  Columns are ours ("cold"), the reference and warm, each with
median and p95 in ms, and an ours/ref ratio column only when both ran.
"""

from __future__ import annotations

from typing import Optional

from cnichain.plugins import registry

from cnichain.benchmarks.latency.stats import median_ratio, verdict

LABEL = {"cold": "ours", "warm": "warm", "reference": "ref"}
CHAIN_ORDER = list(registry.CHAIN_ORDER)


def _ms(v: Optional[float]) -> str:
    return "-" if v is None else (f"{v:.1f}" if v < 100 else f"{v:.0f}")


def _x(v: Optional[float]) -> str:
    return "-" if v is None else f"{v:.2f}x"


def render_table(out: dict) -> str:
    """The summary as plain-text tables for a terminal."""
    lines: list[str] = []
    modes = [m for m in out.get("modes", {})]
    ours = "cold" if "cold" in modes else None
    ref = "reference" if "reference" in modes else None
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
        fall = [p for p, w in info["plugins"].items() if w == "reference" and m != "reference"]
        lines.append(f"mode {m}: {', '.join(sorted(info['plugins']))}"
                     + (f"  (reference fallback: {', '.join(fall)})" if fall else "")
                     + (f"  (left out: {', '.join(info['skipped'])})" if info["skipped"] else ""))
    cols = [m for m in (ours, ref, "warm") if m and m in modes]
    warm_col = bool(ref and "warm" in modes)

    def header(title: str, first: str) -> None:
        lines.append("")
        lines.append(title)
        head = f"  {first:<28}" + "".join(f"{LABEL[m] + ' med':>12}{LABEL[m] + ' p95':>12}" for m in cols)
        head += "  ours/ref" if ours and ref else ""
        head += "  warm/ref" if warm_col else ""
        lines.append(head)

    def row(label: str, cells: dict, r: Optional[float]) -> None:
        text = f"  {label:<28}"
        for m in cols:
            st = cells.get(m) or {}
            text += f"{_ms(st.get('median_ms')):>12}{_ms(st.get('p95_ms')):>12}"
        if ours and ref:
            text += f"{_x(r):>10}"
        if warm_col:
            text += f"{_x(median_ratio(cells.get('warm'), cells.get(ref or ''))):>10}"
        lines.append(text)

    if out.get("version"):
        header("VERSION exec (ms): start-up cost only", "plugin")
        for p, cells in sorted(out["version"].items()):
            row(p, cells, median_ratio(cells.get(ours or "", {}), cells.get(ref or "", {})))
    if out.get("chain"):
        header("chain, per plugin and command (ms, exec to exit; bridge includes its host-local exec)", "plugin command")
        for p in sorted(out["chain"], key=lambda x: (CHAIN_ORDER.index(x) if x in CHAIN_ORDER else 99, x)):
            for c in ("ADD", "DEL", "CHECK"):
                cells = out["chain"][p].get(c)
                if cells:
                    label = f"{p} {c}"
                    impl = (cells.get(ours or "") or {}).get("impl")
                    if impl == "reference":
                        label += " [ref binary]"
                    row(label, cells, cells.get("ratio"))
    tot = out.get("chain_totals", {})
    if tot:
        header("chain totals per pod (ms); ours like-for-like = without plugins the reference lacks", "")
        for c in ("ADD", "DEL", "ADD+DEL"):
            cells = {m: tot[m]["like_for_like" if m != "reference" else "all"][c] for m in cols if m in tot}
            row(f"{c} (like for like)", cells, tot.get("ratio", {}).get(c))
            if "ratio_warm" in tot:
                lines.append(f"  {c + ' warm/ref':<28}{_x(tot['ratio_warm'].get(c)):>12}")
            if ours in tot:
                lines.append(f"  {c + ' (ours, whole chain)':<28}{_ms(tot[ours]['all'][c].get('median_ms')):>12}"
                             f"{_ms(tot[ours]['all'][c].get('p95_ms')):>12}")
    status = out.get("status", {})
    if any(m in status for m in cols):
        header("STATUS sweep: every plugin of the chain at 1.1.0, as containerd 2.1 polls every ~5 s (ms)", "")
        row("per sweep (like for like)", {m: status.get(m, {}).get("like_for_like" if m != ref else "sweep")
                                          for m in cols}, status.get("ratio"))
        row("per sweep (whole chain)", {m: status.get(m, {}).get("sweep") for m in cols},
            median_ratio(status.get(ours or "", {}).get("sweep"), status.get(ref or "", {}).get("sweep")))
        row("after the first sweep", {m: status.get(m, {}).get("later_sweeps") for m in cols},
            median_ratio(status.get(ours or "", {}).get("later_sweeps"), status.get(ref or "", {}).get("later_sweeps")))
        for m in cols:
            failed = status.get(m, {}).get("failed") or {}
            if failed:
                lines.append(f"  {LABEL[m]} fails STATUS in: {', '.join(sorted(failed))} "
                             f"(counted anyway; first: {next(iter(sorted(failed.items())))[1][:80]})")
    par = out.get("parallel", {})
    if any(m in par for m in cols):
        header(f"{out.get('parallel_pods')} pods in parallel: wall time per batch (ms)", "batch")
        for c in ("ADD", "DEL"):
            row(f"{c} x{out.get('parallel_pods')}", {m: par.get(m, {}).get(c) for m in cols}, par.get("ratio", {}).get(c))
    g = out.get("growth", {})
    if g:
        header("growth: latency with N other pods present (ms)", "plugin command @pods")
        for p in ("host-local", "portmap"):
            for c in ("ADD", "DEL"):
                for lvl, cells in sorted(g.get(p, {}).get(c, {}).items(), key=lambda kv: int(kv[0])):
                    fallback = (cells.get(ours or "") or {}).get("impl") == "reference"
                    row(f"{p} {c} @{lvl}" + (" [ref binary]" if fallback else ""), cells, cells.get("ratio"))
    if out.get("targets"):
        lines.append("")
        lines.append("targets")
        for t in out["targets"]:
            lines.append(f"  {t['target']:<62} {_x(t['value']):>8}  (<= {t['limit']}x)  {verdict(t['met'])}")
    for n in out.get("notes", []):
        lines.append(f"note: {n}")
    if out.get("errors"):
        lines.append(f"errors: {len(out['errors'])} (first: {out['errors'][0]['mode']} {out['errors'][0]['what']}: {out['errors'][0]['error'][:200]})")
    return "\n".join(lines)

