"""The optional PNG: growth latency against pods present, ours (and warm) against the reference.

matplotlib is an optional dependency (``pip install 'cnichain[bench]'``); without it the bench
still writes its JSON and table and notes why the chart is missing.  Imported only here.
"""

from __future__ import annotations

from typing import Optional


def write_chart(out: dict, path: str) -> Optional[str]:
    """A PNG of growth latency against pods present; returns why it was skipped, or None."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return "matplotlib is not installed (pip install 'cnichain[bench]')"
    g = out.get("growth", {})
    if not g:
        return "no growth data"
    fig, axes = plt.subplots(1, 2, figsize=(11, 4.2))
    styles = {"cold": "-", "reference": "--", "warm": ":"}
    for ax, plugin in zip(axes, ("host-local", "portmap")):
        for c, color in (("ADD", "tab:blue"), ("DEL", "tab:orange")):
            lv = g.get(plugin, {}).get(c, {})
            for m in ("cold", "warm", "reference"):
                pts = sorted((int(k), v[m]["median_ms"]) for k, v in lv.items() if m in v and v[m].get("n"))
                if pts:
                    ax.plot([p[0] for p in pts], [p[1] for p in pts], styles[m], marker="o", color=color,
                            label=f"{c} {'cnichain' if m == 'cold' else m}")
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
    fig.suptitle(f"cnichain vs reference, {out['when']}")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return None

