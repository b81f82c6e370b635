"""State our plugins hold for containers with no result-cache entry that the runtime does not list.

A result cache can be lost (power loss mid-write, containernetworking/cni#1149; node images that
wipe ``/var/lib/cni`` at boot): the pods it described are gone, but their host-local reservations,
portmap entries, IFBs and masquerade entries are not, and nothing cached names them any more, so
neither a DEL with the cached config nor a CNI GC of a known conflist reaches them.

Each such state names its owner -- host-local's reservation file holds the container ID and
ifname, portmap's identity comment the network and container, bandwidth's IFB alias the same, bridge's
owner-element (or previous release's rule) comments network, ifname and container -- so :func:`find` groups it per (network, container)
from the node view :mod:`.view` reads (the plugins' own readers).  A container is a leak only when
the runtime answered its sandbox listing and does not list it, and no cache entry names it: the
runtime is the truth, and with no answer (no endpoint, an error, a cut stream) nobody can tell, so
nothing is a leak.  The reconciler adds a grace period (a pod whose ADD is running holds state
before its cache entry is written) and a fresh listing right before it acts.

:func:`collect` removes one leak with each plugin's own DEL or GC code, aimed at exactly that
owner (never "everything not valid": a pod whose ADD finished meanwhile must not be hit): each
plugin with state says how in its ``state.py`` (:class:`cnichain.common.plugin_state.Leftovers`),
found through ``plugins/registry.py``.  ``cnichain gc`` shows and applies the same plan.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any, Optional

from cnichain.podstate.view import NodeView

# The plugin types whose state the node view attributes to a container, in the order a leak
# reports and removes it.
HOST_LOCAL, PORTMAP, BANDWIDTH, BRIDGE = "host-local", "portmap", "bandwidth", "bridge"


@dataclass
class Leak:
    network: str
    container_id: str
    # plugin type -> that plugin's records of this owner (see each plugin's state.py)
    held_by: dict[str, list[Any]] = field(default_factory=dict)

    @property
    def key(self) -> str:
        return f"{self.network}/{self.container_id}"

    def held(self) -> list[str]:
        from cnichain.plugins.registry import states

        faces = states()
        out: list[str] = []
        for plugin_type, items in self.held_by.items():
            face = faces[plugin_type].leftovers
            if face is not None:
                out += face.describe(items)
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

        def hold(network: str, plugin_type: str, item: Any, cid: str = cid) -> None:
            leak = leaks.setdefault((network, cid), Leak(network, cid))
            leak.held_by.setdefault(plugin_type, []).append(item)

        for r in cv.reservations:
            hold(r.network, HOST_LOCAL, (os.path.dirname(os.path.dirname(r.path)), r.ip, r.ifname, r.path))
        for m in cv.port_mappings:
            if m.network:  # a chain without its identity rule names nobody: not collected
                hold(m.network, PORTMAP, m)
        for s in cv.shaping:
            if s.get("kind") == "ifb" and s.get("ifb") and s.get("network"):
                hold(str(s["network"]), BANDWIDTH, str(s["ifb"]))
        for mq in cv.masquerade:
            hold(mq.network, BRIDGE, mq)
    for leak in leaks.values():  # report and removal order: the order above, whatever came first
        order = (HOST_LOCAL, PORTMAP, BANDWIDTH, BRIDGE)
        leak.held_by = {t: leak.held_by[t] for t in order if t in leak.held_by}
    return [leaks[k] for k in sorted(leaks)]


def render(leaks: list[Leak], verb: str = "would ") -> list[str]:
    return [f"{verb}collect {leak.key} (no cache entry, not listed by the runtime): {', '.join(leak.held())}"
            for leak in leaks]


def collect(leak: Leak) -> tuple[list[str], bool]:
    """Remove what ``leak`` holds, each kind through its plugin's own code; (report lines, all ok)."""
    from cnichain.plugins.registry import states

    faces = states()
    lines: list[str] = []
    ok = True
    for plugin_type, items in leak.held_by.items():
        face = faces[plugin_type].leftovers
        if face is None:
            continue
        try:
            done = face.collect(leak.network, leak.container_id, items)
        except Exception as exc:  # noqa: BLE001 - a CniError, a kernel refusal: the others still run
            ok = False
            lines.append(f"{plugin_type}: {exc}")
            continue
        lines.extend(done)
    return lines, ok
