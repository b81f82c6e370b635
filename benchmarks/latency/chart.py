"""The optional PNG: the chain per plugin (cold, warm and each reference side by side, ADD and DEL),
and growth latency against pods present, ours (and warm) against each reference (one colour per
mode; ADD solid, DEL dashed).

matplotlib is an optional dependency (``pip install 'cnichain[bench]'``); without it the bench
still writes its JSON and table and notes why the chart is missing.  Imported only here.
"""

from __future__ import annotations

from typing import Optional

from cnichain.plugins import registry


MODE_COLORS = {"cold": "tab:blue", "warm": "tab:green"}
REFERENCE_COLORS = ("tab:red", "tab:orange", "tab:purple", "tab:brown", "tab:pink", "tab:olive")
MODE_LABELS = {"cold": "cnichain cold", "warm": "cnichain warm"}
CHAIN_ORDER = registry.CHAIN_ORDER


def chart_modes(out: dict) -> list[str]:
    """cold, warm, then each reference mode, as far as they ran."""
    refs = [m for m in out.get("references", ["reference"]) if m in out.get("modes", {})]
    return [m for m in ("cold", "warm") if m in out.get("modes", {})] + refs


def color(out: dict, mode: str) -> str:
    refs = out.get("references", ["reference"])
    return MODE_COLORS.get(mode) or REFERENCE_COLORS[refs.index(mode) % len(REFERENCE_COLORS) if mode in refs else 0]


def chain_bars(out: dict) -> tuple[list[str], dict[str, list[Optional[float]]]]:
    """(group labels, {mode: median ms per group}) for the per-plugin chart; pure, for tests.

    Groups are "<plugin> <command>" for ADD and DEL in chain order, then the per-pod chain totals
    (like for like); a mode without a value for a group has None there (no bar).
    """
    chain = out.get("chain", {})
    modes = chart_modes(out)
    refs = out.get("references", ["reference"])
    plugins = sorted(chain, key=lambda p: (CHAIN_ORDER.index(p) if p in CHAIN_ORDER else 99, p))
    labels: list[str] = []
    values: dict[str, list[Optional[float]]] = {m: [] for m in modes}
    for plugin in plugins:
        for c in ("ADD", "DEL"):
            cells = chain[plugin].get(c)
            if not cells:
                continue
            labels.append(f"{plugin}\n{c}")
            for m in modes:
                values[m].append((cells.get(m) or {}).get("median_ms"))
    totals = out.get("chain_totals", {})
    for c in ("ADD", "DEL"):
        if any(m in totals for m in modes):
            labels.append(f"chain/pod\n{c}")
            for m in modes:
                cell = (totals.get(m) or {}).get("all" if m in refs else "like_for_like", {}).get(c, {})
                values[m].append(cell.get("median_ms"))
    return labels, values


def pods_bars(out: dict) -> tuple[list[str], dict[str, list[Optional[float]]]]:
    """(step labels, {mode: median ms per step}) of the pods phase; pure, for tests."""
    pods = out.get("pods", {})
    modes = [m for m in chart_modes(out) if m in pods]
    steps = (("run", "RunPodSandbox"), ("stop_remove", "Stop+Remove"), ("total", "pod total"))
    labels = [title for _, title in steps] if modes else []
    return labels, {m: [(pods[m].get(step) or {}).get("median_ms") for step, _ in steps] for m in modes}


def _draw_bars(ax, out: dict, labels: list[str], values: dict[str, list[Optional[float]]]) -> None:
    width = 0.8 / max(1, len(values))
    for k, (m, meds) in enumerate(values.items()):
        xs = [i + (k - (len(values) - 1) / 2) * width for i in range(len(labels))]
        pts = [(x, v) for x, v in zip(xs, meds) if v is not None]
        if pts:
            ax.bar([p[0] for p in pts], [p[1] for p in pts], width, color=color(out, m), label=MODE_LABELS.get(m, m))
    ax.set_xticks(range(len(labels)))
    ax.set_xticklabels(labels, fontsize=8)
    ax.grid(True, axis="y", alpha=0.3)


def _draw_chain(ax, out: dict) -> None:
    labels, values = chain_bars(out)
    _draw_bars(ax, out, labels, values)
    floor = out.get("floor", {}).get("median_ms")
    if floor:
        ax.axhline(floor, color="grey", linewidth=0.8, linestyle="--", label="python -I -S floor")
    ax.set_ylabel("median exec-to-exit (ms)")
    ax.set_yscale("log")
    ax.set_title("the chain per plugin and command (bridge includes host-local); chain totals per pod")
    ax.legend(fontsize=8, loc="upper center", ncol=6)


def _draw_pods(ax, out: dict) -> None:
    labels, values = pods_bars(out)
    _draw_bars(ax, out, labels, values)
    ax.set_ylabel("median per pod (ms)")
    runtime = out.get("pods", {}).get("runtime", {})
    ax.set_title(f"whole pods through containerd {runtime.get('version', '')}'s CRI (hostPort, bandwidth)")
    ax.legend(fontsize=8, loc="upper left", ncol=5)


def write_chart(out: dict, path: str) -> Optional[str]:
    """A PNG of the chain per plugin and of growth latency; returns why it was skipped, or None."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return "matplotlib is not installed (pip install 'cnichain[bench]')"
    g = out.get("growth", {})
    has_chain = bool(chain_bars(out)[0])
    has_pods = bool(pods_bars(out)[0])
    if not g and not has_chain and not has_pods:
        return "no chain, growth or pods data"
    rows = int(bool(g)) + int(has_chain) + int(has_pods)
    fig = plt.figure(figsize=(12, 4.4 * rows))
    grid = fig.add_gridspec(rows, 2)
    row = 0
    if has_chain:
        _draw_chain(fig.add_subplot(grid[row, :]), out)
        row += 1
    if has_pods:
        _draw_pods(fig.add_subplot(grid[row, :]), out)
        row += 1
    if g:
        _draw_growth([fig.add_subplot(grid[row, i]) for i in range(2)], out)
    fig.suptitle(f"cnichain vs reference, {out['when']}")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return None


def _draw_growth(axes: list, out: dict) -> None:
    g = out["growth"]
    for ax, plugin in zip(axes, ("host-local", "portmap")):
        for c, style in (("ADD", "-"), ("DEL", "--")):
            lv = g.get(plugin, {}).get(c, {})
            for m in chart_modes(out):
                pts = sorted((int(k), v[m]["median_ms"]) for k, v in lv.items() if m in v and v[m].get("n"))
                if pts:
                    ax.plot([p[0] for p in pts], [p[1] for p in pts], style, marker="o", color=color(out, m),
                            label=f"{c} {MODE_LABELS.get(m, m)}")
        floor = out.get("floor", {}).get("median_ms")
        if floor:
            ax.axhline(floor, color="grey", linewidth=0.8, label="python -I -S floor")
        levels = sorted({int(k) for c in ("ADD", "DEL") for k in g.get(plugin, {}).get(c, {})})
        ax.set_xscale("symlog", linthresh=10)
        if levels:
            ax.set_xlim(0, max(levels) * 1.3 + 1)
            ax.set_xticks(levels)
            ax.set_xticklabels([str(v) for v in levels])
        ax.set_xlabel("other pods present")
        ax.set_ylabel("median exec-to-exit (ms)")
        ax.set_title(plugin)
        ax.set_ylim(bottom=0)
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize=8)

