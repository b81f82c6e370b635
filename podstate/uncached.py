"""State our plugins hold for containers with no result-cache entry that the runtime does not list.

A result cache can be lost (power loss mid-write, containernetworking/cni#1149; node images that
wipe ``/var/lib/cni`` at boot): the pods it described are gone, but their host-local reservations,
portmap chains and map elements, IFBs and masquerade rules are not, and nothing cached names them
any more, so neither a DEL with the cached config nor a CNI GC of a known conflist reaches them.

Each such state names its owner -- host-local's reservation file holds the container ID and
ifname, portmap's identity rule the network and container, bandwidth's IFB alias the same, bridge's
rule comments network, ifname and container -- so :func:`find` groups it per (network, container)
from the node view :mod:`.view` reads (the plugins' own readers).  A container is a leak only when
the runtime answered its sandbox listing and does not list it, and no cache entry names it: the
runtime is the truth, and with no answer (no endpoint, an error, a cut stream) nobody can tell, so
nothing is a leak.  The reconciler adds a grace period (a pod whose ADD is running holds state
before its cache entry is written) and a fresh listing right before it acts.

:func:`collect` removes one leak with each plugin's own DEL or GC code, aimed at exactly that
owner (never "everything not valid": a pod whose ADD finished meanwhile must not be hit):
host-local's ``release_by_id`` under its lock, portmap's ``remove_many`` of that owner's chains and
keys, bandwidth's GC steps for that IFB (the redirect and qdiscs of a veth still pointing at it,
then the IFB), bridge's ``remove_masquerade`` and ``remove_spoof_check`` for that attachment.
``cnichain gc`` shows and applies the same plan.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Optional

from cnichain.podstate.view import NodeView


@dataclass
class Leak:
    network: str
    container_id: str
    reservations: list[tuple[str, str, Optional[str], str]] = field(default_factory=list)  # (data_dir, ip, ifname, path)
    port_mappings: list[str] = field(default_factory=list)  # "proto/hostPort", for the report
    portmap_owner: bool = False  # portmap holds a chain for this (network, container)
    ifbs: list[str] = field(default_factory=list)
    masquerade: list[tuple[str, list[str]]] = field(default_factory=list)  # (ifname, addresses)

    @property
    def key(self) -> str:
        return f"{self.network}/{self.container_id}"

    def held(self) -> list[str]:
        out = [f"host-local {ip}" for _d, ip, _i, _p in self.reservations]
        out += [f"portmap {m}" for m in self.port_mappings] or (["portmap chains"] if self.portmap_owner else [])
        out += [f"ifb {name}" for name in self.ifbs]
        out += [f"masquerade {','.join(addrs)}" for _i, addrs in self.masquerade]
        return out


def find(node: NodeView, listed: Optional[set[str]], cached_ids: set[str]) -> list[Leak]:
    """The leaks in ``node``: state of containers no cache entry names and ``listed`` lacks.

    ``listed`` None (the runtime could not tell) finds nothing.  ``cached_ids``: container IDs of
    every cache entry, of any network (an attachment on another network keeps the pod's state).
    """
    if listed is None:
        return []
    leaks: dict[tuple[str, str], Leak] = {}
    for cv in node.containers:
        cid = cv.container_id
        if cv.attachments or cid in cached_ids or cid in listed or not cid:
            continue

        def get(network: str, cid: str = cid) -> Leak:
            return leaks.setdefault((network, cid), Leak(network, cid))

        for r in cv.reservations:
            get(r.network).reservations.append((os.path.dirname(os.path.dirname(r.path)), r.ip, r.ifname, r.path))
        for m in cv.port_mappings:
            if m.network:  # a chain without its identity rule names nobody: not collected
                leak = get(m.network)
                leak.portmap_owner = True
                leak.port_mappings.append(f"{m.protocol}/{m.host_port}")
        for s in cv.shaping:
            if s.get("kind") == "ifb" and s.get("ifb") and s.get("network"):
                get(str(s["network"])).ifbs.append(str(s["ifb"]))
        for mq in cv.masquerade:
            get(mq.network).masquerade.append((mq.ifname, list(mq.addresses)))
    return [leaks[k] for k in sorted(leaks)]


def render(leaks: list[Leak], verb: str = "would ") -> list[str]:
    return [f"{verb}collect {leak.key} (no cache entry, not listed by the runtime): {', '.join(leak.held())}"
            for leak in leaks]


def collect(leak: Leak) -> tuple[list[str], bool]:
    """Remove what ``leak`` holds, each kind through its plugin's own code; (report lines, all ok)."""
    lines: list[str] = []
    ok = True
    for what, step in (("host-local", _release), ("portmap", _portmap), ("bandwidth", _ifbs),
                       ("bridge", _masquerade)):
        try:
            done = step(leak)
        except Exception as exc:  # noqa: BLE001 - a CniError, a kernel refusal: the others still run
            ok = False
            lines.append(f"{what}: {exc}")
            continue
        lines.extend(done)
    return lines, ok


def _release(leak: Leak) -> list[str]:
    from cnichain.plugins.host_local.kernel import DiskStore

    out = []
    by_dir: dict[tuple[str, str], list[str]] = {}
    for data_dir, ip, ifname, _path in leak.reservations:
        by_dir.setdefault((data_dir, ifname or ""), []).append(ip)
    for (data_dir, ifname), ips in sorted(by_dir.items()):
        store = DiskStore(data_dir, leak.network)
        with store.locked(create=False) as held:
            errors = store.release_by_id(leak.container_id, ifname) if held else []
        if errors:
            raise RuntimeError("; ".join(errors))
        out.append(f"released {', '.join(ips)}")
    return out


def _portmap(leak: Leak) -> list[str]:
    if not leak.portmap_owner:
        return []
    from cnichain.plugins.portmap import kernel
    from cnichain.plugins.portmap.names import owner_id

    owner = owner_id(leak.network, leak.container_id)
    kernel.remove_many(lambda snap: [o for o in snap.owners() if o == owner])
    return [f"removed portmap chains {', '.join(leak.port_mappings)}"]


def _ifbs(leak: Leak) -> list[str]:
    if not leak.ifbs:
        return []
    from cnichain.common import netlink
    from cnichain.plugins.bandwidth import kernel

    out = []
    with netlink.route_socket() as host:
        for name in leak.ifbs:
            link = kernel.get_link(host, name=name)
            if link is None or kernel.alias_owner(link.alias) != (leak.network, leak.container_id):
                continue  # gone meanwhile, or no longer this owner's: not ours to delete
            for veth in kernel.veths_redirecting_to(host, link.index):
                kernel.remove_shaping(host, veth, link.index)
            kernel.delete_link(host, link.index)
            out.append(f"deleted {name}")
    return out


def _masquerade(leak: Leak) -> list[str]:
    if not leak.masquerade:
        return []
    from cnichain.plugins.bridge import firewall

    out = []
    for ifname, addrs in leak.masquerade:
        firewall.remove_masquerade(leak.network, leak.container_id, ifname)
        firewall.remove_spoof_check(leak.network, leak.container_id, ifname)
        out.append(f"removed masquerade of {','.join(addrs)}")
    return out
