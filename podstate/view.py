"""One view of a node, per container: what the runtime cached and what our plugins hold, and
whether anything is left over from a pod that no longer exists.

Orphan evidence, strongest first: an ``--live`` list from the operator (a container not on it is
gone); the result cache (no entry for the container: no runtime will ever DEL it; an entry whose
namespace path is gone: the pod is gone); the kernel itself (an IFB that no host veth redirects to
any more).  Without any of these a container is not called an orphan: inspect reports, it does
not guess.
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass, field
from typing import Any, Optional

from cnichain.plugins.host_local.config import DEFAULT_DATA_DIR as HOST_LOCAL_DATA_DIR
from cnichain.plugins.tuning.config import DEFAULT_DATA_DIR as TUNING_DATA_DIR
from cnichain.podstate import cache as cache_mod
from cnichain.podstate import files, kernel
from cnichain.plugins.bridge.state import Masquerade
from cnichain.plugins.portmap.listing import HeldMapping


@dataclass
class Sources:
    """Where to look; every path validated by the caller (absolute, no NUL)."""

    cache_dirs: list[str]
    ipam_dirs: list[str]
    tuning_dirs: list[str]
    node_netns: Optional[str] = None
    live: Optional[set[str]] = None  # container IDs the operator says are alive
    read_kernel: bool = True
    listed: Optional[set[str]] = None  # sandbox IDs the runtime lists (None: not asked / no answer)


@dataclass
class ContainerView:
    container_id: str
    attachments: list[cache_mod.CacheEntry] = field(default_factory=list)
    reservations: list[files.Reservation] = field(default_factory=list)
    port_mappings: list[HeldMapping] = field(default_factory=list)
    shaping: list[dict] = field(default_factory=list)
    tuning_backups: list[files.TuningBackup] = field(default_factory=list)
    masquerade: list[Masquerade] = field(default_factory=list)
    orphan_reasons: list[str] = field(default_factory=list)

    @property
    def networks(self) -> set[str]:
        nets = {a.network for a in self.attachments} | {r.network for r in self.reservations}
        nets |= {m.network for m in self.port_mappings} | {m.network for m in self.masquerade}
        nets |= {s["network"] for s in self.shaping if s.get("network")}
        return {n for n in nets if n}

    @property
    def holds_state(self) -> bool:
        return bool(self.reservations or self.port_mappings or self.shaping or self.tuning_backups or self.masquerade)

    @property
    def orphan(self) -> bool:
        return bool(self.orphan_reasons)

    def to_dict(self) -> dict:
        attachments = []
        for a in self.attachments:
            attachments.append({
                "network": a.network, "ifname": a.ifname, "netns": a.netns, "netns_alive": a.netns_alive,
                "ips": a.ips(), "cache_file": a.path,
            })
        return {
            "container_id": self.container_id,
            "networks": sorted(self.networks),
            "attachments": attachments,
            "host_local": [asdict(r) for r in self.reservations],
            "portmap": [{name: getattr(m, name) for name in m._fields} for m in self.port_mappings],
            "bandwidth": self.shaping,
            "tuning": [asdict(t) for t in self.tuning_backups],
            "masquerade": [asdict(m) for m in self.masquerade],
            "orphan": self.orphan,
            "orphan_reasons": self.orphan_reasons,
        }


@dataclass
class NodeView:
    containers: list[ContainerView]
    unattributed: list[dict] = field(default_factory=list)  # state whose container cannot be told
    sources: dict = field(default_factory=dict)
    problems: list[str] = field(default_factory=list)  # sources that could not be read
    pools: list[files.Pool] = field(default_factory=list)  # host-local range sets of cached networks
    stale_cache: list[dict] = field(default_factory=list)  # result-cache entries of attachments that are gone

    def to_dict(self) -> dict:
        return {
            "containers": [c.to_dict() for c in self.containers],
            "pools": [p.to_dict() for p in self.pools],
            "unattributed": self.unattributed,
            "sources": self.sources,
            "problems": self.problems,
            "stale_cache": self.stale_cache,
            "orphans": sorted(c.container_id for c in self.containers if c.orphan),
        }


def discovered_dirs(entries: list[cache_mod.CacheEntry]) -> tuple[list[str], list[str]]:
    """host-local and tuning data dirs named in cached conflists (runtimes that cache ``config``)."""
    ipam, tuning = [], []
    for e in entries:
        plugins = (e.config or {}).get("plugins")
        for p in plugins if isinstance(plugins, list) else []:
            if not isinstance(p, dict):
                continue
            ip = p.get("ipam")
            if isinstance(ip, dict) and ip.get("type") == "host-local":
                d = ip.get("dataDir") or HOST_LOCAL_DATA_DIR
                if isinstance(d, str) and files.safe_dir(d) and d not in ipam:
                    ipam.append(d)
            if p.get("type") == "tuning":
                d = p.get("dataDir") or TUNING_DATA_DIR
                if isinstance(d, str) and files.safe_dir(d) and d not in tuning:
                    tuning.append(d)
    return ipam, tuning


def pools_of(entries: list[cache_mod.CacheEntry], network: str = "") -> list[files.Pool]:
    """Free addresses per host-local range set of every network a cached conflist names (once each)."""
    seen, out = set(), []
    for e in entries:
        config = e.config or {}
        plugins = config.get("plugins")
        for p in plugins if isinstance(plugins, list) else []:
            ipam = p.get("ipam") if isinstance(p, dict) else None
            if not isinstance(ipam, dict) or ipam.get("type") != "host-local" or (network and e.network != network):
                continue
            key = (e.network, json.dumps(ipam, sort_keys=True))
            if key in seen:
                continue
            seen.add(key)
            version = config.get("cniVersion")
            out.extend(files.read_pools(e.network, version if isinstance(version, str) else "", ipam))
    return out


def collect(src: Sources, network: str = "", container: str = "") -> NodeView:
    entries: list[cache_mod.CacheEntry] = []
    for d in src.cache_dirs:
        entries.extend(cache_mod.read_cache(d))
    found_ipam, found_tuning = discovered_dirs(entries)
    ipam_dirs = list(dict.fromkeys(src.ipam_dirs + found_ipam))
    tuning_dirs = list(dict.fromkeys(src.tuning_dirs + found_tuning))
    view = NodeView([], sources={
        "cache_dirs": src.cache_dirs, "ipam_dirs": ipam_dirs, "tuning_dirs": tuning_dirs,
        "node_netns": src.node_netns or "", "live": sorted(src.live) if src.live is not None else None,
    })
    by_id: dict[str, ContainerView] = {}

    def get(cid: str) -> ContainerView:
        if cid not in by_id:
            by_id[cid] = ContainerView(cid)
        return by_id[cid]

    for e in entries:
        get(e.container_id).attachments.append(e)
        why = stale_reason(e, src.listed)
        if why and (not network or e.network == network) and (not container or e.container_id == container):
            view.stale_cache.append({"cache_file": e.path, "network": e.network, "container_id": e.container_id,
                                     "ifname": e.ifname, "why": why, "has_config": e.config is not None})
    for d in ipam_dirs:
        for r in files.read_reservations(d):
            get(r.container_id).reservations.append(r)
    for d in tuning_dirs:
        for t in files.read_tuning_backups(d):
            get(t.container_id).tuning_backups.append(t)
    ifb_orphans: dict[str, str] = {}
    if src.read_kernel:
        _read_kernel(src, entries, get, view, ifb_orphans)

    for cv in by_id.values():
        _classify(cv, src, ifb_orphans)
    chosen = []
    for cid in sorted(by_id):
        cv = by_id[cid]
        if container and cid != container:
            continue
        if network and network not in cv.networks:
            continue
        chosen.append(cv)
    view.containers = chosen
    view.pools = pools_of(entries, network)
    return view


def stale_reason(e: cache_mod.CacheEntry, listed: Optional[set[str]]) -> str:
    """Why a cache entry is stale ("" when it is not): its namespace is gone and the runtime, when
    it was asked, does not list its sandbox.  An entry naming no namespace is never stale."""
    if e.netns_alive is not False:
        return ""
    if listed is not None and e.container_id in listed:
        return ""
    return f"netns {e.netns} is gone" + ("" if listed is None else " and the runtime does not list the sandbox")


def _read_kernel(src: Sources, entries: list[cache_mod.CacheEntry], get: Any, view: NodeView,
                 ifb_orphans: dict[str, str]) -> None:
    try:
        for m in kernel.portmap_mappings(src.node_netns):
            if m.container_id:
                get(m.container_id).port_mappings.append(m)
            else:
                view.unattributed.append({"kind": "portmap", **asdict(m)})
        for mq in kernel.masquerades(src.node_netns):
            get(mq.container_id).masquerade.append(mq)
    except Exception as exc:  # no nftables binding, or not allowed to list
        view.problems.append(f"nftables: {exc}")
    try:
        shaped, veth_tbf = kernel.shapings(src.node_netns)
    except Exception as exc:  # no pyroute2, or the namespace vanished
        view.problems.append(f"netlink: {exc}")
        return
    from cnichain.plugins.bandwidth import state as bandwidth

    owned, anonymous, orphans = bandwidth.attribute(shaped, veth_tbf, entries, kernel.pod_shaping)
    for cid, doc in owned:
        get(cid).shaping.append(doc)
    view.unattributed.extend(anonymous)
    ifb_orphans.update(orphans)


def _classify(cv: ContainerView, src: Sources, ifb_orphans: dict[str, str]) -> None:
    reasons = cv.orphan_reasons
    if src.live is not None and cv.container_id not in src.live:
        reasons.append("not in the --live list")
    caches = [d for d in src.cache_dirs if cache_mod.cache_exists(d)]
    if not cv.attachments and caches:
        reasons.append(f"no entry in the result cache ({', '.join(os.path.join(d, 'results') for d in caches)})")
    gone = [a.netns for a in cv.attachments if a.netns_alive is False]
    if gone and len(gone) == len([a for a in cv.attachments if a.netns_alive is not None]):
        reasons.append(f"network namespace {gone[0]} no longer exists")
    for s in cv.shaping:
        if s.get("ifb") in ifb_orphans:
            reasons.append(ifb_orphans[s["ifb"]])


def check_inputs(cache_dirs: list[str], ipam_dirs: list[str], tuning_dirs: list[str], node_netns: str,
                 ids: list[str], network: str = "") -> None:
    """Refuse operator input that is not what it claims to be, before any file or kernel is read."""
    for opt, dirs in (("--cache-dir", cache_dirs), ("--ipam-dir", ipam_dirs), ("--tuning-dir", tuning_dirs)):
        for d in dirs:
            if not files.safe_dir(d):
                raise ValueError(f"{opt} {d!r}: must be an absolute path")
    if node_netns and (not files.safe_dir(node_netns) or not os.path.exists(node_netns)):
        raise ValueError(f"--node-netns {node_netns!r}: no such namespace path")
    for cid in ids:
        if not cache_mod.valid_id(cid):
            raise ValueError(f"invalid container ID {cid!r}")
    if network and not cache_mod.valid_id(network):
        raise ValueError(f"invalid network name {network!r}")
