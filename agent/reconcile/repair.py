"""Per plugin: is what it installed for an attachment still in the kernel, and put it back if not.

Every check and every repair is the plugin's own code, in this process, on the stdin libcni would
send (:mod:`.attachments`), in the node namespace the agent runs in -- there is no second writer:

* portmap: its CHECK (our table, the shared chains, the container's chain and keys); repaired by
  its ADD, whose slow path rebuilds the table's skeleton and this container's chains and keys
  without touching any other container's (and flushes the UDP/SCTP conntrack entries of the ports);
* bandwidth: its CHECK (the layout its result records: TBF on the host veth, IFB, its TBF, ingress
  qdisc and redirect, and what lives in the pod's namespace); repaired by its DEL (whatever half is
  left, never another tool's qdiscs or filters) then its ADD (which picks the layout anew: a pod whose
  host veth an eBPF tool took meanwhile moves into the pod's namespace instead of fighting it);
* bridge: only its nftables rules, ``ipMasq``'s masquerade and ``macspoofchk``'s MAC spoof check
  (the rest of its state is the pod's own veth and addresses, which the reconciler does not
  re-create); repaired by its ``add_masquerade`` and ``add_spoof_check``, each with the values
  of the cached result (addresses; host veth and container MAC).

A repairer answers only for state of its kind of change (:mod:`.netlink_events`), so an nftables
deletion does not make every bandwidth CHECK run.  And a pass reads each plugin's kernel state
once (its *survey*: portmap's table, the masquerade chain, one host netlink session), then asks a
*quick* question per attachment of it -- are its chains, keys, rules, IFB and qdiscs there --
and runs the plugin's full CHECK only for an attachment whose quick answer is no.  A pass over a
node of intact pods therefore costs about one listing, not one CHECK per pod.
"""

from __future__ import annotations

import json
from contextlib import ExitStack
from dataclasses import dataclass
from typing import Any, Callable, Optional

from cnichain.common.errors import CniError
from cnichain.common.skel import Request, build_request

from cnichain.agent.reconcile import netlink_events as ev
from cnichain.agent.reconcile.attachments import Target


@dataclass(frozen=True)
class Repairer:
    plugin_type: str
    kinds: frozenset[str]
    applies: Callable[[Request], bool]  # does this attachment's config ask for kernel state?
    check: Callable[[Request], Optional[str]]  # None: all there; else what is missing
    repair: Callable[[Request], None]
    undo: Callable[[Request], None]  # remove what a repair put back (the attachment was deleted meanwhile)
    survey: Callable[[ExitStack], Any]  # one read of this plugin's kernel state, for a whole pass
    intact: Callable[[Any, Request], bool]  # per attachment, against the survey: True = nothing to check


def _checked(handler: Callable[[Request], Any]) -> Callable[[Request], Optional[str]]:
    def check(req: Request) -> Optional[str]:
        try:
            handler(req)
        except CniError as exc:
            return str(exc)
        return None

    return check


# -- portmap --------------------------------------------------------------------------------------

def _portmap_applies(req: Request) -> bool:
    from cnichain.plugins.portmap.config import load

    return bool(load(req.conf).mappings) and req.prev_result is not None


def _portmap_survey(_stack: ExitStack) -> Any:
    from cnichain.plugins.portmap import kernel

    return kernel.snapshot()  # None: no table at all


def _portmap_intact(snap: Any, req: Request) -> bool:
    from cnichain.plugins.portmap.config import container_ips, load
    from cnichain.plugins.portmap.names import dnat_chain, masq_chain
    from cnichain.plugins.portmap.plan import SKELETON_RULES, plan_owner

    if snap is None:
        return False
    if any(len(snap.comments.get(chain, [])) < n for chain, n in SKELETON_RULES.items()):
        return False
    prev = req.require_prev_result()
    plan = plan_owner(req.network_name, req.container_id, load(req.conf), container_ips(prev, req.ifname))
    if plan.empty:
        return True
    have = snap.comments.get(dnat_chain(plan.owner))
    if have is None or any(k not in have or k not in snap.elements for k in plan.dnat_keys + plan.masq_keys):
        return False
    return not plan.masq_rules or len(snap.comments.get(masq_chain(plan.owner), [])) >= len(plan.masq_rules)


def _portmap_check(req: Request) -> Optional[str]:
    from cnichain.plugins.portmap.plugin import cmd_check

    return _checked(cmd_check)(req)


def _portmap_repair(req: Request) -> None:
    from cnichain.plugins.portmap.plugin import cmd_add

    cmd_add(req)


def _portmap_undo(req: Request) -> None:
    from cnichain.plugins.portmap.plugin import cmd_del

    cmd_del(req)


# -- bandwidth ------------------------------------------------------------------------------------

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


def _bandwidth_survey(stack: ExitStack) -> Any:
    from cnichain.common import netlink

    return _HostTc(stack.enter_context(netlink.session()))


def _bandwidth_intact(tc: Any, req: Request) -> bool:
    """The structure CHECK verifies, from the survey and one filter dump, without entering the pod:
    the host veth named in the result, its TBF, the IFB, its TBF, the ingress qdisc, the redirect.
    A layout with a half in the pod's namespace (the result says which) gets the full CHECK."""
    from cnichain.plugins.bandwidth import kernel
    from cnichain.plugins.bandwidth.config import ifb_name, load
    from cnichain.plugins.bandwidth.plugin import layout_of

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
    if cfg.ingress is not None and not tc.has(veth.index, "tbf", kernel.TC_H_ROOT):
        return False
    if cfg.egress is not None:
        ifb = tc.links.get(ifb_name(req.network_name, req.container_id))
        if ifb is None or not tc.has(ifb.index, "tbf", kernel.TC_H_ROOT):
            return False
        if not tc.has(veth.index, "ingress", kernel.TC_H_INGRESS):
            return False
        if ifb.index not in kernel.redirect_targets(tc.host, veth.index):
            return False
    return True


def _bandwidth_check(req: Request) -> Optional[str]:
    from cnichain.plugins.bandwidth.plugin import cmd_check

    return _checked(cmd_check)(req)


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


# -- bridge (ipMasq) ------------------------------------------------------------------------------

def _bridge_addresses(req: Request) -> list[str]:
    prev = req.prev_result
    return [ip.address for ip in prev.ips] if prev is not None else []


def _bridge_wants(req: Request) -> tuple[list[str], Optional[tuple[str, str]]]:
    """What bridge installed in nftables for this attachment: the addresses its ``ipMasq`` rules
    masquerade, and the ``(host veth, container MAC)`` of its ``macspoofchk`` rule (None: no
    spoof check, or the cached result does not say which veth and MAC)."""
    from cnichain.plugins.bridge.config import load

    cfg = load(req.conf, req.args, with_mac=False)
    masq = _bridge_addresses(req) if cfg.ip_masq and cfg.is_layer3 else []
    spoof = None
    prev = req.prev_result
    if cfg.macspoofchk and prev is not None:
        # bridge reports the bridge, the host veth, then the pod's interface; later plugins
        # (bandwidth's IFB) and bridge's VLAN gateway device come after the pod's.
        host = ""
        for iface in prev.interfaces:
            if iface.sandbox and iface.name == req.ifname:
                if host and iface.mac:
                    spoof = (host, iface.mac.lower())
                break
            if not iface.sandbox and iface.name != cfg.bridge:
                host = iface.name
    return masq, spoof


def _bridge_applies(req: Request) -> bool:
    masq, spoof = _bridge_wants(req)
    return bool(masq) or spoof is not None


def _bridge_tags(masq_listing: Optional[list[dict]], spoof_listing: Optional[list[dict]]
                 ) -> tuple[dict[str, set[str]], dict[str, set[tuple[str, str]]]]:
    """Per owner tag: the addresses masqueraded, and the (veth, MAC) pairs spoof-checked."""
    from cnichain.plugins.bridge import rules

    masq: dict[str, set[str]] = {}
    for rule in rules.rules_in(masq_listing):
        tag = rules.tag_of(str(rule.get("comment", "")))
        masq.setdefault(tag, set()).update(a.split("/")[0] for a in rules.rule_addresses(rule))
    spoof: dict[str, set[tuple[str, str]]] = {}
    for rule in rules.rules_in(spoof_listing):
        spoof.setdefault(rules.tag_of(str(rule.get("comment", ""))), set()).add(rules.spoof_guard(rule))
    return masq, spoof


def _bridge_survey(_stack: ExitStack) -> Any:
    from cnichain.plugins.bridge import firewall

    return _bridge_tags(firewall.masquerade_listing(), firewall.spoof_listing())


def _bridge_missing(req: Request, masq_tags: dict[str, set[str]], spoof_tags: dict[str, set[tuple[str, str]]]
                    ) -> Optional[str]:
    from cnichain.plugins.bridge import rules

    tag = rules.owner_tag(req.network_name, req.container_id, req.ifname)
    masq, spoof = _bridge_wants(req)
    out = []
    missing = sorted({a.split("/")[0] for a in masq} - masq_tags.get(tag, set()))
    if missing:
        out.append(f"masquerade rules missing for {', '.join(missing)}")
    if spoof is not None and spoof not in spoof_tags.get(tag, set()):
        out.append(f"MAC spoof check of {spoof[1]} on {spoof[0]} missing")
    return "; ".join(out) or None


def _bridge_intact(tags: Any, req: Request) -> bool:
    return _bridge_missing(req, *tags) is None


def _bridge_check(req: Request) -> Optional[str]:
    return _bridge_missing(req, *_bridge_survey(ExitStack()))


def _bridge_repair(req: Request) -> None:
    """Each set of rules replaced by bridge's own transaction (its stale rules of this
    attachment dropped, its table and chain created if gone)."""
    from cnichain.plugins.bridge import firewall

    masq, spoof = _bridge_wants(req)
    if masq:
        firewall.add_masquerade(req.network_name, req.container_id, req.ifname, masq)
    if spoof is not None:
        firewall.add_spoof_check(req.network_name, req.container_id, req.ifname, *spoof)


def _bridge_undo(req: Request) -> None:
    from cnichain.plugins.bridge import firewall

    masq, spoof = _bridge_wants(req)
    if masq:
        firewall.remove_masquerade(req.network_name, req.container_id, req.ifname)
    if spoof is not None:
        firewall.remove_spoof_check(req.network_name, req.container_id, req.ifname)


REPAIRERS = {
    r.plugin_type: r
    for r in (
        Repairer("portmap", frozenset({ev.NFT}), _portmap_applies, _portmap_check, _portmap_repair, _portmap_undo,
                 _portmap_survey, _portmap_intact),
        Repairer("bandwidth", frozenset({ev.TC}), _bandwidth_applies, _bandwidth_check, _bandwidth_repair,
                 _bandwidth_undo, _bandwidth_survey, _bandwidth_intact),
        Repairer("bridge", frozenset({ev.NFT}), _bridge_applies, _bridge_check, _bridge_repair, _bridge_undo,
                 _bridge_survey, _bridge_intact),
    )
}


def as_command(req: Request, command: str) -> Request:
    """The same request for another command (a repair is an ADD of the input CHECK was given)."""
    env = dict(req.env)
    env["CNI_COMMAND"] = command
    return build_request(command, env, req.stdin)


def requests(target: Target, bin_dirs: list[str], kinds: frozenset[str] = ev.ALL) -> list[tuple[Repairer, Request]]:
    """The (repairer, parsed request) pairs of ``target``'s plugins that ask for kernel state."""
    out = []
    for plugin in target.conflist.plugins:
        rep = REPAIRERS.get(str(plugin.get("type")))
        if rep is None or not (rep.kinds & kinds):
            continue
        stdin = json.dumps(target.plugin_conf(plugin)).encode()
        req = build_request("CHECK", target.plugin_env("CHECK", bin_dirs), stdin)
        try:
            if rep.applies(req):
                out.append((rep, req))
        except CniError:
            continue  # a config its plugin refuses installed nothing to repair
    return out
