"""The reconciler's view, as one root-only JSON file: written by the reconciler process after each
pass, read by the agent (its Prometheus metrics) and by ``cnichain agent status``.

A file, not a socket: the agent's event loop stays untouched by the reconciler (it only reads a
few KB when /metrics is asked for), and the view survives a reconciler restart, which reloads
the attachments whose state it has seen installed (:attr:`Counters` restart from zero, as
Prometheus counters may).
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass, field
from typing import Any, Optional

from cnichain.common import atomic

_MAX_BYTES = 16 << 20


@dataclass
class Counters:
    repairs: dict[str, int] = field(default_factory=dict)  # "<plugin>/<outcome>" -> n
    backoffs: int = 0
    leaks_found: int = 0
    leaks_collected: int = 0
    leak_failures: int = 0
    cache_pruned: int = 0
    uncached_found: int = 0  # containers holding our state with no cache entry, not listed by the runtime
    uncached_collected: int = 0
    uncached_failures: int = 0
    sweeps: int = 0
    last_sweep: float = 0.0  # unix time
    sweep_seconds: float = 0.0

    def repaired(self, plugin: str, outcome: str) -> None:
        key = f"{plugin}/{outcome}"
        self.repairs[key] = self.repairs.get(key, 0) + 1


def write(path: str, doc: dict) -> None:
    """Replace ``path`` atomically with ``doc`` (0600; a reader never sees half a file)."""
    atomic.write_file(path, json.dumps(doc, indent=1, sort_keys=True).encode(), 0o600)


def read(path: str) -> Optional[dict]:
    """The last view written at ``path``; None when there is none (or it is not ours to trust)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC | os.O_NOFOLLOW)
    except OSError:
        return None
    with os.fdopen(fd, "rb") as fh:
        st = os.fstat(fh.fileno())
        if st.st_uid != os.geteuid() or st.st_mode & 0o077:
            return None  # written by someone else: never trusted
        data = fh.read(_MAX_BYTES)
    try:
        doc = json.loads(data)
    except ValueError:
        return None
    return doc if isinstance(doc, dict) else None


def counters_of(doc: dict) -> Counters:
    raw = doc.get("counters")
    known = Counters.__dataclass_fields__
    return Counters(**{k: v for k, v in raw.items() if k in known}) if isinstance(raw, dict) else Counters()


def _esc(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def metric_lines(doc: Optional[dict], running: bool) -> list[str]:
    """Prometheus text lines for the reconciler (``running``: its process is alive)."""

    def family(name: str, kind: str, text: str) -> list[str]:
        return [f"# HELP {name} {text}", f"# TYPE {name} {kind}"]

    c = counters_of(doc) if doc else Counters()
    out = family("cnichain_agent_reconciler_up", "gauge", "1 while the reconciler process runs.")
    out.append(f"cnichain_agent_reconciler_up {int(running)}")
    out += family("cnichain_agent_reconcile_repairs_total", "counter",
                  "Kernel state re-installed for live attachments, by plugin and outcome.")
    for key, n in sorted(c.repairs.items()):
        plugin, _, outcome = key.partition("/")
        out.append(f'cnichain_agent_reconcile_repairs_total{{plugin="{_esc(plugin)}",outcome="{_esc(outcome)}"}} {n}')
    rows: list[tuple[str, str, str, Any]] = [
        ("cnichain_agent_reconcile_backoffs_total", "counter", "Times a repair was given up for a while because "
         "something kept removing the state.", c.backoffs),
        ("cnichain_agent_reconcile_leaks_found_total", "counter", "Attachments whose network namespace was found gone.",
         c.leaks_found),
        ("cnichain_agent_reconcile_leaks_collected_total", "counter", "Leaked attachments torn down with their "
         "cached config.", c.leaks_collected),
        ("cnichain_agent_reconcile_leak_failures_total", "counter", "Teardowns of leaked attachments that failed.",
         c.leak_failures),
        ("cnichain_agent_reconcile_uncached_found_total", "counter", "Containers found holding state of our "
         "plugins with no result-cache entry and not listed by the runtime.", c.uncached_found),
        ("cnichain_agent_reconcile_uncached_collected_total", "counter", "Such containers whose state was removed "
         "after the grace period.", c.uncached_collected),
        ("cnichain_agent_reconcile_uncached_failures_total", "counter", "Removals of such state that failed.",
         c.uncached_failures),
        ("cnichain_agent_reconcile_cache_pruned_total", "counter", "Stale result-cache files removed.",
         c.cache_pruned),
        ("cnichain_agent_reconcile_sweeps_total", "counter", "Full sweeps run.", c.sweeps),
        ("cnichain_agent_reconcile_sweep_duration_seconds", "gauge", "How long the last full sweep took.",
         f"{c.sweep_seconds:.6f}"),
        ("cnichain_agent_reconcile_last_sweep_timestamp_seconds", "gauge", "Unix time the last full sweep ended.",
         f"{c.last_sweep:.3f}"),
    ]
    for name, kind, text, value in rows:
        out += family(name, kind, text)
        out.append(f"{name} {value}")
    pools = [p for p in (doc.get("pools") if doc else None) or [] if isinstance(p, dict)]
    for name, field_name, text in (
            ("cnichain_agent_ipam_free_addresses", "free", "Addresses host-local can still hand out, per range set "
             "of a network in the result caches."),
            ("cnichain_agent_ipam_capacity_addresses", "capacity", "Addresses a host-local range set holds "
             "(the gateway excluded).")):
        out += family(name, "gauge", text)
        for p in pools:
            out.append(f'{name}{{network="{_esc(str(p.get("network")))}",range_set="{_esc(str(p.get("range_set")))}"}} '
                       f'{int(p.get(field_name) or 0)}')
    return out


def as_dict(counters: Counters) -> dict:
    return asdict(counters)


def render_text(doc: dict) -> str:
    """``cnichain agent status``: the view for a person."""
    import time

    c = counters_of(doc)
    last = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(c.last_sweep)) if c.last_sweep else "never"
    pid = doc.get("pid")
    alive = isinstance(pid, int) and os.path.exists(f"/proc/{pid}")
    lines = [
        f"reconciler  pid {pid}{'' if alive else ' (NOT RUNNING: this is its last view)'}  mode {doc.get('mode')}  grace {doc.get('grace')} s  "
        f"networks {','.join(doc.get('networks') or []) or 'all'}",
        f"runtime listing: {doc.get('runtime_listing')}",
        f"last sweep  {last} ({c.sweep_seconds * 1000:.0f} ms), {c.sweeps} sweep(s)",
        "repairs     " + (", ".join(f"{k} {n}" for k, n in sorted(c.repairs.items())) or "none"),
        f"leaks       found {c.leaks_found}, collected {c.leaks_collected}, failed {c.leak_failures}; "
        f"backoffs {c.backoffs}; cache files pruned {c.cache_pruned}",
        f"uncached    found {c.uncached_found}, collected {c.uncached_collected}, failed {c.uncached_failures}"
        + (f" ({doc['uncached_note']})" if doc.get("uncached_note") else ""),
    ]
    attachments = doc.get("attachments") or {}
    for att in sorted(attachments):
        row = attachments[att]
        plugins = row.get("plugins") or {}
        states = ", ".join(f"{p} {v.get('state')}" for p, v in sorted(plugins.items()))
        lines.append(f"  {att}: {states or '-'}" + (f"  [leak: {row['leak']}]" if row.get("leak") else ""))
        for p, v in sorted(plugins.items()):
            if v.get("state") not in ("ok", "repaired") and v.get("detail"):
                lines.append(f"      {p}: {v['detail']}")
    for item in doc.get("stale_cache") or []:
        lines.append(f"  stale cache entry {item.get('cache_file')}: {item.get('why')}, dead for {item.get('dead_for')} s")
    for item in doc.get("uncached") or []:
        lines.append(f"  no cache entry {item.get('attachment')}: {', '.join(item.get('held') or [])}, "
                     f"for {item.get('uncached_for')} s")
    for key in doc.get("backing_off") or []:
        lines.append(f"  backing off: {key}")
    for p in doc.get("pools") or []:
        lines.append(f"  addresses {p.get('network')} {p.get('range_set')}: {p.get('free')} free of "
                     f"{p.get('capacity')}")
    return "\n".join(lines)
