"""``cnichain inspect`` output: one block per container for people, the whole view as JSON for tools."""

from __future__ import annotations

import json

from cnichain.podstate.view import ContainerView, NodeView


def _rate(tbf: dict) -> str:
    if not tbf:
        return "-"
    burst = f" burst {tbf['burst_bits']} bit" if "burst_bits" in tbf else f" buffer {tbf['buffer_ticks']} ticks"
    return f"rate {tbf['rate_bits']} bit/s{burst} limit {tbf['limit_bytes']} B"


def _container(cv: ContainerView) -> list[str]:
    head = f"container {cv.container_id}" + ("  ORPHAN" if cv.orphan else "")
    lines = [head]
    for a in cv.attachments:
        alive = {True: "alive", False: "gone", None: "unknown"}[a.netns_alive]
        lines.append(f"  attachment  {a.network}/{a.ifname}  netns={a.netns or '-'} ({alive})  "
                     f"ips={','.join(a.ips()) or '-'}  cache={a.path}")
    for r in cv.reservations:
        lines.append(f"  host-local  {r.network}  {r.ip} ifname={r.ifname or '(legacy)'}  file={r.path}")
    for m in cv.port_mappings:
        host = m.host_ip or ("0.0.0.0" if m.family == 4 else "::")
        pod = f"[{m.pod_ip}]" if ":" in m.pod_ip else m.pod_ip
        cond = f"  if {m.conditions}" if m.conditions else ""
        lines.append(f"  portmap     {m.network}  {m.protocol} {host}:{m.host_port} -> {pod}:{m.pod_port}{cond}")
    for s in cv.shaping:
        if s.get("kind") == "ifb":
            lines.append(f"  bandwidth   {s.get('network') or '?'}  ifb {s['ifb']}: egress {_rate(s.get('egress') or {})}; "
                         f"ingress on {s.get('host_veth') or '-'}: {_rate(s.get('ingress') or {})}")
        elif s.get("kind") == "pod":
            into = f"on {s['host_veth']}" if s.get("host_veth") else "in the pod"
            lines.append(f"  bandwidth   {s.get('network')}  egress on {s['ifname']} in the pod: "
                         f"{_rate(s.get('egress') or {})}; ingress {into}: {_rate(s.get('ingress') or {})}")
        else:
            lines.append(f"  bandwidth   {s.get('network')}  ingress on {s['host_veth']}: {_rate(s.get('ingress') or {})}")
    for t in cv.tuning_backups:
        saved = ", ".join(f"{k}={v}" for k, v in sorted(t.saved.items()) if k != "sysctl")
        sysctls = raw if isinstance(raw := t.saved.get("sysctl"), dict) else {}
        parts = [saved] if saved else []
        parts += [f"{rel} {e.get('old')}->{e.get('new')}" for rel, e in sorted(sysctls.items()) if isinstance(e, dict)]
        lines.append(f"  tuning      {t.ifname}  restores {'; '.join(parts) or 'nothing'}  file={t.path}")
    for mq in cv.masquerade:
        lines.append(f"  masquerade  {mq.network}/{mq.ifname}  {', '.join(mq.addresses) or '-'}")
    for reason in cv.orphan_reasons:
        lines.append(f"  orphan: {reason}")
    return lines


def render_text(view: NodeView) -> str:
    lines: list[str] = []
    for cv in view.containers:
        lines += _container(cv)
    for u in view.unattributed:
        lines.append(f"unattributed {u.get('kind')}: {json.dumps(u, sort_keys=True)}")
    for pool in view.pools:
        full = "  EXHAUSTED: the next ADD fails" if pool.free == 0 else ""
        lines.append(f"pool {pool.network}  {pool.range_set}  {pool.free} of {pool.capacity} free  "
                     f"dir={pool.data_dir}{full}")
    for st in view.stale_cache:
        how = "gc DELs it with its cached conflist" if st["has_config"] else "no conflist cached: gc removes the file"
        lines.append(f"stale cache entry {st['cache_file']}: {st['why']} ({how})")
    for p in view.problems:
        lines.append(f"could not read {p}")
    orphans = sum(1 for c in view.containers if c.orphan)
    lines.append(f"{len(view.containers)} container(s), {orphans} orphan(s), "
                 f"{len(view.stale_cache)} stale cache entr{'y' if len(view.stale_cache) == 1 else 'ies'}")
    return "\n".join(lines)


def render_json(view: NodeView) -> str:
    return json.dumps(view.to_dict(), indent=2, default=str)
