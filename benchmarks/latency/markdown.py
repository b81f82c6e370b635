"""The published run as Markdown: the figures in README.md and benchmarks/README.md are data.

One bench JSON is published as ``benchmarks/results/latest.json``; every table of figures in the
Markdown sits between a pair of marker comments and is rendered from that file, so a document can
never show numbers that no committed run produced (tests/unit/test_bench_markdown.py fails when
the text between the markers differs from what the JSON renders).

Pure apart from :func:`main`: a summary dict in, Markdown out.  :func:`publish` turns a fresh
``bench-<time>.json`` into the committed file (machine-specific paths dropped, a note on the run's
conditions added); :func:`splice` replaces the marked blocks of a document.

    python -m cnichain.benchmarks.latency.markdown --publish benchmarks/results/bench-<time>.json \\
        --note "what the machine was doing"       # then re-render the documents
    python -m cnichain.benchmarks.latency.markdown            # re-render from latest.json
    python -m cnichain.benchmarks.latency.markdown --check    # exit 1 when a document is stale
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
from typing import Callable, Optional

from cnichain.benchmarks.latency.render import label

RESULTS = os.path.join("benchmarks", "results", "latest.json")
# Each document and the blocks it carries, relative to the checkout.
DOCUMENTS = {"README.md": ("ratios",), os.path.join("benchmarks", "README.md"): ("medians", "storm")}
BEGIN = "<!-- rendered from benchmarks/results/latest.json: {name} (python -m cnichain.benchmarks.latency.markdown) -->"
END = "<!-- end of {name} -->"
_BLOCK = re.compile(r"<!-- rendered from benchmarks/results/latest\.json: (?P<name>[a-z-]+) \(.*?\) -->\n"
                    r"(?P<body>.*?)<!-- end of (?P=name) -->", re.S)
# Keys of a bench JSON that hold paths of the machine it ran on: not published.
_MACHINE_PATHS = (("modes", "*", "bin_dirs"), ("pods", "runtime", "bin_dir"), ("options", "output_dir"))

Cell = Callable[[dict, str], Optional[str]]  # (summary, "ours/ref" pair key) -> the cell's text


def _x(v: Optional[float]) -> str:
    return "-" if v is None else f"{v:.2f}x"


def _ms(v: Optional[float]) -> str:
    return "-" if v is None else (f"{v:.1f}" if v < 100 else f"{v:.0f}")


def _count(v: Optional[float]) -> str:
    return "" if v is None else f"{v:.0f}"


def _pair_ratio(*path: str) -> Cell:
    """A cell whose ratios sit at ``path`` (``ratios`` per pair, then the key under the pair)."""
    *where, key = path

    def cell(out: dict, pair: str) -> Optional[str]:
        node = out
        for step in where:
            node = node.get(step) or {}
        ratios = (node.get("ratios") or {}).get(pair)
        if ratios is None:
            return None
        return _x(ratios.get(key) if key else ratios)

    return cell


def _plugin(ptype: str, command: str) -> Cell:
    def cell(out: dict, pair: str) -> Optional[str]:
        ratios = ((out.get("chain") or {}).get(ptype, {}).get(command) or {}).get("ratios") or {}
        return _x(ratios[pair]) if pair in ratios else None

    return cell


def _both(first: Cell, second: Cell) -> Cell:
    """"a / b" of two cells (ADD / DEL in one column)."""
    def cell(out: dict, pair: str) -> Optional[str]:
        a, b = first(out, pair), second(out, pair)
        return None if a is None and b is None else f"{a or '-'} / {b or '-'}"

    return cell


def _references(out: dict) -> list[str]:
    return [r for r in out.get("references", []) if r in out.get("modes", {})]


def _runtime(out: dict) -> str:
    rt = (out.get("pods") or {}).get("runtime") or {}
    version = ".".join(str(rt.get("version", "")).lstrip("v").split(".")[:2])
    return f"{rt.get('name', 'the runtime')} {version}".strip()


def _ratio_rows(out: dict) -> list[tuple[str, Cell, tuple[str, ...]]]:
    """(label, cell, ours modes shown) per row of the README's table."""
    both, warm = ("warm", "cold"), ("warm",)
    rows = [
        (f"whole pods through {_runtime(out)}'s CRI: RunPodSandbox + Stop + Remove", _pair_ratio("pods", "total"), both),
        ("chain ADD per pod (bridge+host-local, portmap, bandwidth, tuning)", _pair_ratio("chain_totals", "ADD"), both),
        ("chain ADD+DEL per pod", _pair_ratio("chain_totals", "ADD+DEL"), both),
        (f"{out.get('parallel_pods')} pods in parallel, ADD / DEL (wall time of the batch)",
         _both(_pair_ratio("parallel", "ADD"), _pair_ratio("parallel", "DEL")), warm),
        ("STATUS sweep of the chain, like for like (containerd 2.1+ runs it every ~5 s)", _pair_ratio("status", ""), warm),
    ]
    names = {"bridge": "bridge (+host-local)"}
    rows += [(f"{names.get(p, p)} ADD / DEL", _both(_plugin(p, "ADD"), _plugin(p, "DEL")), warm)
             for p in ("bridge", "portmap", "tuning", "bandwidth")]
    return rows


def _header_line(out: dict) -> str:
    """When and where the run was taken, its interpreter floor, and the note it was published with."""
    m = out.get("machine", {})
    load = m.get("loadavg_start_end") or []
    loads = f", load average {load[0][0]:.1f} at its start, {load[1][0]:.1f} at its end" if len(load) == 2 else ""
    floor = (out.get("floor") or {}).get("median_ms")
    text = (f"Run of {str(out.get('when', ''))[:10]} on {m.get('cpus')} CPUs (kernel {m.get('kernel')}{loads}); "
            f"Python floor (a bare `python3 -I -S -c pass`): {_ms(floor)} ms.")
    note = (out.get("published") or {}).get("note")
    return f"{text} {note}" if note else text


def ratios_block(out: dict) -> str:
    """README's table: ours / each reference on medians, warm and cold, one row per measurement."""
    refs = _references(out)
    names = ", ".join(label(r) for r in refs)
    lines = [_header_line(out), "", f"| ours / reference ({names}) | warm | cold |", "|---|---|---|"]
    for text, cell, shown in _ratio_rows(out):
        cols = []
        for ours in ("warm", "cold"):
            values = [cell(out, f"{ours}/{r}") for r in refs] if ours in shown else []
            cols.append(", ".join(v or "-" for v in values) if any(values) else "")
        lines.append(f"| {text} | {cols[0]} | {cols[1]} |")
    return "\n".join(lines)


def _label(mode: str) -> str:
    """A mode's column head: ``cold``, ``warm``, or the reference's short label (``1.9.1-nft``)."""
    return mode if mode in ("cold", "warm") else label(mode)


def _mode_cols(out: dict) -> list[str]:
    return [m for m in ("cold", "warm") if m in out.get("modes", {})] + _references(out)


def medians_block(out: dict) -> str:
    """The medians (ms) behind README's ratios: per plugin and command, the chain per pod, the
    parallel batch and whole pods, one column per mode."""
    cols = _mode_cols(out)
    lines = [_header_line(out), "", "| median, ms | " + " | ".join(_label(m) for m in cols) + " |",
             "|---" * (len(cols) + 1) + "|"]

    def row(text: str, cells: dict) -> None:
        lines.append(f"| {text} | " + " | ".join(_ms((cells.get(m) or {}).get("median_ms")) for m in cols) + " |")

    chain = out.get("chain") or {}
    for ptype in ("bridge", "portmap", "bandwidth", "tuning", "route-override"):
        for command in ("ADD", "DEL"):
            if command in chain.get(ptype, {}):
                row(f"{ptype} {command}", chain[ptype][command])
    totals = out.get("chain_totals") or {}
    refs = _references(out)
    for command in ("ADD", "DEL", "ADD+DEL"):
        row(f"chain {command} per pod (like for like)",
            {m: totals.get(m, {}).get("all" if m in refs else "like_for_like", {}).get(command) for m in cols})
    status = out.get("status") or {}
    row("STATUS sweep (like for like)", {m: status.get(m, {}).get("sweep" if m in refs else "like_for_like") for m in cols})
    par = out.get("parallel") or {}
    for command in ("ADD", "DEL"):
        row(f"{out.get('parallel_pods')} pods in parallel, {command} batch", {m: par.get(m, {}).get(command) for m in cols})
    pods = out.get("pods") or {}
    for step, text in (("run", "RunPodSandbox"), ("stop_remove", "StopPodSandbox + RemovePodSandbox")):
        row(f"{text} through {_runtime(out)}", {m: pods.get(m, {}).get(step) for m in cols})
    return "\n".join(lines)


def storm_block(out: dict) -> str:
    """The storm phase: per width, each batch's wall time warm and per reference, warm's ratio, and
    the warm agent's cgroup peak, OOM kills and queue."""
    refs = _references(out)
    lines = ["| pods at once | command | warm | " + " | ".join(label(r) for r in refs)
             + " | agent peak (of limit) | OOM kills | queue peak |", "|---" * (len(refs) + 6) + "|"]
    idle = out.get("agent_idle") or {}
    if idle:
        lines.append("| " + " | ".join(["0 (idle)", "", "", *[""] * len(refs), f"{idle.get('usage_mib', 0):.1f} MiB", "", ""])
                     + " |")
    for width, cells in sorted((out.get("storm") or {}).items(), key=lambda kv: int(kv[0])):
        for command in ("ADD", "DEL"):
            warm = (cells.get("warm") or {}).get(command) or {}
            refs_text = []
            for r in refs:
                ms = ((cells.get(r) or {}).get(command) or {}).get("median_ms")
                ratio = ((cells.get("ratios") or {}).get(f"warm/{r}") or {}).get(command)
                refs_text.append(f"{_ms(ms)} ({_x(ratio)})")
            agent = (cells.get("agent") or {}).get(command) or {}
            peak = (f"{agent.get('peak_mib', 0):.0f} of {agent.get('limit_mib', 0):.0f} MiB" if agent else "")
            lines.append(f"| {width} | {command} | {_ms(warm.get('median_ms'))} | " + " | ".join(refs_text)
                         + f" | {peak} | {agent.get('oom_kills', '')} | {_count(agent.get('queue_peak'))} |")
    return "\n".join(lines)


RENDERERS: dict[str, Callable[[dict], str]] = {"ratios": ratios_block, "medians": medians_block, "storm": storm_block}


def render(out: dict) -> dict[str, str]:
    """Every block's Markdown for one published summary."""
    return {name: fn(out) for name, fn in RENDERERS.items()}


def marked(name: str, body: str) -> str:
    """A block between its marker comments, as a document holds it."""
    return f"{BEGIN.format(name=name)}\n{body}\n{END.format(name=name)}"


def splice(text: str, blocks: dict[str, str]) -> tuple[str, list[str]]:
    """``text`` with every marked block replaced by its rendering, and the names found, in order.

    ValueError for a marked block that has no renderer, so a typo in a marker cannot hide a table
    from the check.
    """
    found: list[str] = []

    def replace(m: re.Match) -> str:
        name = m.group("name")
        if name not in blocks:
            raise ValueError(f"no rendering for the marked block {name!r}")
        found.append(name)
        return marked(name, blocks[name])

    return _BLOCK.sub(replace, text), found


def publish(out: dict, note: str, source: str) -> dict:
    """The summary as it is committed: its machine paths dropped, ``published`` saying where it
    came from and on what kind of machine."""
    doc = json.loads(json.dumps(out))
    for path in _MACHINE_PATHS:
        _drop(doc, path)
    doc["published"] = {"source": os.path.basename(source), "note": note}
    return doc


def _drop(node: object, path: tuple[str, ...]) -> None:
    if not isinstance(node, dict) or not path:
        return
    head, rest = path[0], path[1:]
    children = list(node.values()) if head == "*" else [node.get(head)]
    if not rest:
        if head != "*":
            node.pop(head, None)
        return
    for child in children:
        _drop(child, rest)


def _read(path: str) -> str:
    with open(path, encoding="utf-8") as fh:
        return fh.read()


def _write(path: str, text: str) -> None:
    tmp = f"{path}.tmp"
    with open(tmp, "w", encoding="utf-8") as fh:
        fh.write(text)
    os.replace(tmp, path)


def main(argv: Optional[list[str]] = None) -> int:
    p = argparse.ArgumentParser(prog="python -m cnichain.benchmarks.latency.markdown",
                                description="Render the figures of README.md and benchmarks/README.md from "
                                            "benchmarks/results/latest.json.")
    p.add_argument("--root", default=".", help="the checkout (default: the current directory)")
    p.add_argument("--publish", metavar="JSON", help="first make this bench-<time>.json the published latest.json")
    p.add_argument("--note", default="", help="with --publish: the run's conditions, shown beside its figures")
    p.add_argument("--check", action="store_true", help="change nothing; exit 1 when a document differs")
    a = p.parse_args(argv)
    results = os.path.join(a.root, RESULTS)
    if a.publish:
        _write(results, json.dumps(publish(json.loads(_read(a.publish)), a.note, a.publish), indent=2, sort_keys=True) + "\n")
    blocks = render(json.loads(_read(results)))
    stale: dict[str, str] = {}
    for doc, names in DOCUMENTS.items():
        text = _read(os.path.join(a.root, doc))
        new, found = splice(text, blocks)
        missing = [n for n in names if n not in found]
        if missing:  # before any document is written, so a failed run leaves them all as they were
            print(f"{doc}: no marked block {', '.join(missing)}", file=sys.stderr)
            return 2
        if new != text:
            stale[doc] = new
    for doc, new in stale.items():
        if not a.check:
            _write(os.path.join(a.root, doc), new)
        print(f"{doc}: {'differs from' if a.check else 'rendered from'} {RESULTS}")
    return 1 if stale and a.check else 0


if __name__ == "__main__":
    raise SystemExit(main())
