"""bandwidth's reconciler face: what it installed for an attachment, read back, repaired, collected.

* check: its CHECK (the layout its result records: TBF on the host veth, IFB, its TBF, ingress
  qdisc and redirect, and what lives in the pod's namespace); repaired by its DEL (whatever half is
  left, never another tool's qdiscs or filters) then its ADD (which picks the layout anew: a pod whose
  host veth an eBPF tool took meanwhile moves into the pod's namespace instead of fighting it);
* survey: one host netlink session with every link and qdisc of the node; intact: the structure
  CHECK verifies, from it and one filter dump, without entering the pod;
* node view: :func:`shapings` (its IFBs, their TBF, the host veths redirecting to them) and
  :func:`pod_shaping` (what it keeps in a pod's namespace), through its netlink calls, and
  :func:`attribute`, which names the container each belongs to;
* leftovers: its GC steps for one owner's IFB (the redirect and qdiscs of a veth still pointing
  at it, then the IFB).
"""

from __future__ import annotations

from contextlib import ExitStack
from dataclasses import dataclass
from typing import Any, Callable, Optional

from cnichain.common.errors import CniError
from cnichain.common.plugin_state import TC, Leftovers, PluginState, Repair, checked
from cnichain.common.skel import Request


# -- repair ---------------------------------------------------------------------------------------

def _bandwidth_applies(req: Request) -> bool:
    from cnichain.plugins.bandwidth.config import load

    return load(req.conf).shaped and req.prev_result is not None


class _HostTc:
    """One host netlink session with every link and qdisc of the node, dumped once per pass."""

    def __init__(self, host: Any) -> None:
        from cnichain.plugins.bandwidth import kernel

        self.host = host
        self.links = {str(m.get_attr("IFLA_IFNAME")): kernel._link(m) for m in host.get_links()}
        self.qdiscs: dict[int, set[tuple[str, int, int]]] = {}
        for m in host.get_qdiscs():
            self.qdiscs.setdefault(int(m["index"]), set()).add(
                (str(m.get_attr("TCA_KIND") or ""), int(m["handle"]), int(m["parent"])))

    def has(self, index: int, kind: str, parent: int) -> bool:
        return any(k == kind and p == parent for k, _h, p in self.qdiscs.get(index, ()))

    def shaped(self, index: int) -> bool:
        """A root TBF, with nothing but its own FIFO or an fq_codel under it (CHECK reads the numbers)."""
        from cnichain.plugins.bandwidth import kernel

        children = {k for k, _h, p in self.qdiscs.get(index, ()) if p == kernel.TBF_CLASS}
        return self.has(index, "tbf", kernel.TC_H_ROOT) and children <= {kernel.AQM_KIND}


def _bandwidth_survey(stack: ExitStack) -> Any:
    from cnichain.common import netlink

    return _HostTc(stack.enter_context(netlink.session()))


def _bandwidth_intact(tc: Any, req: Request) -> bool:
    """The structure CHECK verifies, from the survey and one filter dump, without entering the pod:
    the host veth named in the result, its TBF, the IFB, its TBF (each with no child but its own
    FIFO or an fq_codel), the ingress qdisc, the redirect.
    A layout with a half in the pod's namespace (the result says which) gets the full CHECK."""
    from cnichain.plugins.bandwidth import kernel
    from cnichain.plugins.bandwidth.config import ifb_name, load
    from cnichain.plugins.bandwidth.layouts import layout_of

    cfg = load(req.conf)
    prev = req.require_prev_result()
    layout = layout_of(prev, req.network_name, req.container_id)
    if (cfg.ingress is not None and layout.ingress == "pod") or (cfg.egress is not None and layout.egress == "pod"):
        return False
    veths = [tc.links[i.name] for i in prev.interfaces
             if not i.sandbox and i.name in tc.links and tc.links[i.name].kind == "veth"]
    if len(veths) != 1:
        return False
    veth = veths[0]
    if cfg.ingress is not None and not tc.shaped(veth.index):
        return False
    if cfg.egress is not None:
        ifb = tc.links.get(ifb_name(req.network_name, req.container_id))
        if ifb is None or not tc.shaped(ifb.index):
            return False
        if not tc.has(veth.index, "ingress", kernel.TC_H_INGRESS):
            return False
        if ifb.index not in kernel.redirect_targets(tc.host, veth.index):
            return False
    return True


def _bandwidth_check(req: Request) -> Optional[str]:
    from cnichain.plugins.bandwidth.plugin import cmd_check

    return checked(cmd_check)(req)


def _bandwidth_repair(req: Request) -> None:
    from cnichain.plugins.bandwidth.plugin import cmd_add, cmd_del

    cmd_del(req)  # whatever half is left (an IFB without its qdisc, a veth without its redirect)
    _drop_dead_redirect(req)
    cmd_add(req)


def _drop_dead_redirect(req: Request) -> None:
    """The ingress qdisc DEL leaves when our IFB or our redirect was deleted under it: no filter,
    or filters that redirect only to links that no longer exist.  It shapes nothing, and on the
    veth of an attachment whose shaping this reconciler saw installed (the only ones it repairs)
    it is what is left of ours; it would make ADD's own ingress qdisc fail with EEXIST.  An ingress
    qdisc with a filter of another kind (bpf, flower...) or a redirect to a live device is kept.  (The kernel reports a redirect to a deleted
    device with ifindex 0.)"""
    from cnichain.common import netlink
    from cnichain.plugins.bandwidth import kernel

    with netlink.session() as host:
        try:
            veth = kernel.host_veth_by_peer(host, kernel.veth_peer_index(req.netns, req.ifname))
        except CniError:
            return  # no host veth (macvlan, ipvlan, host-device): nothing of ours on the host side
        if not kernel.has_ingress_qdisc(host, veth.index):
            return
        foreign = [m for m in host.get_filters(index=veth.index, parent=kernel.INGRESS_HANDLE)
                   if m.get_attr("TCA_KIND") not in (None, "u32")]
        targets = kernel.redirect_targets(host, veth.index)
        if not foreign and not any(i > 0 and kernel.get_link(host, index=i) is not None for i in targets):
            kernel.delete_qdisc(host, veth.index, kernel.INGRESS_HANDLE, kernel.TC_H_INGRESS)


def _bandwidth_undo(req: Request) -> None:
    from cnichain.plugins.bandwidth.plugin import cmd_del

    cmd_del(req)


# -- node view ------------------------------------------------------------------------------------

@dataclass
class Shaping:
    ifb: str
    network: str = ""  # from the IFB's alias; "" for IFBs the reference plugin made
    container_id: str = ""
    egress: Optional[dict] = None  # TBF on the IFB: rate/burst in bits, limit in bytes
    host_veth: str = ""
    ingress: Optional[dict] = None  # TBF on the host veth


def tick() -> float:
    """Psched ticks per microsecond of this kernel; 0.0 when it cannot be read (rates are still
    worth showing)."""
    from cnichain.plugins.bandwidth import plan as bandwidth_plan

    try:
        with open("/proc/net/psched", "rb") as fh:
            return bandwidth_plan.tick_in_usec(fh.read().decode("ascii", "replace"))
    except (OSError, CniError):  # no procfs, or the plugin's parse error
        return 0.0


def _tbf_view(params: Any, tick: float) -> dict:
    from cnichain.plugins.bandwidth import plan as bandwidth_plan

    out = {"rate_bits": params.rate * 8, "limit_bytes": params.limit, "buffer_ticks": params.buffer}
    if tick:
        out["burst_bits"] = bandwidth_plan.burst_bytes(params, tick) * 8
    return out


def pod_shaping(netns_path: str, ifname: str, ifb: str) -> dict:
    """What bandwidth keeps in a pod's namespace (layouts ``split`` and ``pod``): the root TBF of
    the pod's interface (egress) and the TBF of its IFB there (ingress); {} when none.  Raises
    when the namespace cannot be entered or read."""
    from cnichain.common import netlink
    from cnichain.plugins.bandwidth import kernel as bandwidth

    ticks = tick()
    out: dict = {}
    with netlink.route_socket(netns_path) as pod:
        for name, direction in ((ifname, "egress"), (ifb, "ingress")):
            link = netlink.get_link(pod, name=name)
            root = bandwidth.root_tbf(pod, link.index) if link is not None else None
            if root is not None and root.tbf is not None:
                out[direction] = _tbf_view(root.tbf, ticks)
    return out


def shapings(node_netns: Optional[str]) -> tuple[list[Shaping], dict[str, dict]]:
    """Every IFB of bandwidth's naming in the node namespace with the limits the kernel holds, and
    the root TBF of every veth that has one (ingress-only shaping has no IFB; its veth is named in
    the result)."""
    from cnichain.common import netlink
    from cnichain.plugins.bandwidth import kernel as bandwidth
    from cnichain.plugins.bandwidth.config import IFB_PREFIX

    ticks = tick()
    out = []
    veth_tbf: dict[str, dict] = {}
    with netlink.session(node_netns or None) as host:
        for veth in bandwidth.veth_links(host):
            vroot = bandwidth.root_tbf(host, veth.index)
            if vroot is not None and vroot.tbf is not None:
                veth_tbf[veth.name] = _tbf_view(vroot.tbf, ticks)
        for link in bandwidth.ifb_links(host):
            if not link.name.startswith(IFB_PREFIX):
                continue
            shaping = Shaping(ifb=link.name)
            owner = bandwidth.alias_owner(link.alias)
            if owner is not None:
                shaping.network, shaping.container_id = owner
            root = bandwidth.root_tbf(host, link.index)
            if root is not None and root.tbf is not None:
                shaping.egress = _tbf_view(root.tbf, ticks)
            for veth in bandwidth.veths_redirecting_to(host, link.index)[:1]:
                shaping.host_veth = veth.name
                vroot = bandwidth.root_tbf(host, veth.index)
                if vroot is not None and vroot.tbf is not None:
                    shaping.ingress = _tbf_view(vroot.tbf, ticks)
            out.append(shaping)
    return out, veth_tbf


def attribute(shaped: list[Shaping], veth_tbf: dict[str, dict], attachments: list[Any],
              in_pod: Callable[[str, str, str], dict]
              ) -> tuple[list[tuple[str, dict]], list[dict], dict[str, str]]:
    """The node view's shaping per container, from :func:`shapings` and the cached attachments
    (each with ``network``, ``container_id``, ``ifname``, ``netns``, ``netns_alive``, ``result``):
    (container ID, document) pairs, the documents of IFBs nobody can be named for, and per IFB
    that no host veth redirects to any more why it is an orphan.  ``in_pod`` reads the pod's side
    (:func:`pod_shaping`, {} when it cannot)."""
    from dataclasses import asdict

    from cnichain.plugins.bandwidth.config import ifb_name

    owned: list[tuple[str, dict]] = []
    anonymous: list[dict] = []
    orphans: dict[str, str] = {}
    # IFBs the reference made carry no alias: name them from the attachments we know of.
    known = {ifb_name(e.network, e.container_id): (e.network, e.container_id) for e in attachments}
    for s in shaped:
        if not s.container_id and s.ifb in known:
            s.network, s.container_id = known[s.ifb]
        if not s.host_veth:
            orphans[s.ifb] = f"IFB {s.ifb} has no host veth redirecting to it (the pod's veth is gone)"
        doc = {"kind": "ifb", **asdict(s)}
        if s.container_id:
            owned.append((s.container_id, doc))
        else:
            anonymous.append(doc)
    seen_veths = {s.host_veth for s in shaped}
    shaped_ids = {s.container_id for s in shaped if s.container_id}
    for e in attachments:  # no host IFB: a TBF on the host veth the result names, and the pod's side
        shaping: dict = {}
        for iface in e.result.get("interfaces") or []:
            name = iface.get("name") if isinstance(iface, dict) else None
            if name in veth_tbf and not iface.get("sandbox") and name not in seen_veths:
                shaping = {"kind": "veth", "network": e.network, "host_veth": name, "ingress": veth_tbf[name]}
        if e.netns_alive and e.ifname and e.container_id not in shaped_ids:
            inside = in_pod(e.netns, e.ifname, ifb_name(e.network, e.container_id))
            if inside:  # layout split (host veth in, pod out) or pod (both inside)
                shaping = {"kind": "pod", "network": e.network, "host_veth": shaping.get("host_veth", ""),
                           "ifname": e.ifname, "ingress": inside.get("ingress", shaping.get("ingress")),
                           "egress": inside.get("egress")}
        if shaping:
            owned.append((e.container_id, shaping))
    return owned, anonymous, orphans


# -- leftovers ------------------------------------------------------------------------------------

def _describe(items: list[Any]) -> list[str]:
    return [f"ifb {name}" for name in items]


def _ifbs(network: str, container_id: str, items: list[Any]) -> list[str]:
    if not items:
        return []
    from cnichain.common import netlink
    from cnichain.plugins.bandwidth import kernel

    out = []
    with netlink.route_socket() as host:
        for name in items:
            link = kernel.get_link(host, name=name)
            if link is None or kernel.alias_owner(link.alias) != (network, container_id):
                continue  # gone meanwhile, or no longer this owner's: not ours to delete
            for veth in kernel.veths_redirecting_to(host, link.index):
                kernel.remove_shaping(host, veth, link.index)
            kernel.delete_link(host, link.index)
            out.append(f"deleted {name}")
    return out


STATE = PluginState(
    "bandwidth",
    repair=Repair(frozenset({TC}), _bandwidth_applies, _bandwidth_check, _bandwidth_repair, _bandwidth_undo,
                  _bandwidth_survey, _bandwidth_intact),
    leftovers=Leftovers(_describe, _ifbs),
)
