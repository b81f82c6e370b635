"""Per plugin: is what it installed for an attachment still in the kernel, and put it back if not.

Every check and every repair is the plugin's own code, in this process, on the stdin libcni would
send (:mod:`.attachments`), in the node namespace the agent runs in -- there is no second writer:

* portmap: its CHECK (our table, the shared chains, the container's chain and keys); repaired by
  its ADD, whose slow path rebuilds the table's skeleton and this container's chains and keys
  without touching any other container's (and flushes the UDP/SCTP conntrack entries of the ports);
* bandwidth: its CHECK (TBF on the host veth, IFB, its TBF, ingress qdisc and redirect); repaired by
  its DEL (whatever half is left) then its ADD;
* bridge: only the masquerade rules of ``ipMasq`` (the rest of its state is the pod's own veth and
  addresses, which the reconciler does not re-create); repaired by its ``add_masquerade``.

A repairer answers only for state of its kind of change (:mod:`.netlink_events`), so an nftables
deletion does not make every bandwidth CHECK run.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Callable, Optional

from cnichain.common.errors import CniError
from cnichain.common.skel import Request, build_request

from . import netlink_events as ev
from .attachments import Target


@dataclass(frozen=True)
class Repairer:
    plugin_type: str
    kinds: frozenset[str]
    applies: Callable[[Request], bool]  # does this attachment's config ask for kernel state?
    check: Callable[[Request], Optional[str]]  # None: all there; else what is missing
    repair: Callable[[Request], None]
    undo: Callable[[Request], None]  # remove what a repair put back (the attachment was deleted meanwhile)


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


def _bandwidth_check(req: Request) -> Optional[str]:
    from cnichain.plugins.bandwidth.plugin import cmd_check

    return _checked(cmd_check)(req)


def _bandwidth_repair(req: Request) -> None:
    from cnichain.plugins.bandwidth.plugin import cmd_add, cmd_del

    cmd_del(req)  # whatever half is left (an IFB without its qdisc, a veth without its redirect)
    _drop_dead_redirect(req)
    cmd_add(req)


def _drop_dead_redirect(req: Request) -> None:
    """The ingress qdisc DEL leaves when our IFB was deleted under it: its filters redirect only
    to links that no longer exist, so it shapes nothing and belongs to no one else's set-up, but
    it makes ADD's own ingress qdisc fail with EEXIST.  Anything else on the veth is kept.  (The
    kernel reports a redirect to a deleted device with ifindex 0.)"""
    from cnichain.common import netlink
    from cnichain.plugins.bandwidth import kernel

    with netlink.session() as host:
        veth = kernel.host_veth_by_peer(host, kernel.veth_peer_index(req.netns, req.ifname))
        if not kernel.has_ingress_qdisc(host, veth.index):
            return
        targets = kernel.redirect_targets(host, veth.index)
        if targets and not any(i > 0 and kernel.get_link(host, index=i) is not None for i in targets):
            kernel.delete_qdisc(host, veth.index, kernel.INGRESS_HANDLE, kernel.TC_H_INGRESS)


def _bandwidth_undo(req: Request) -> None:
    from cnichain.plugins.bandwidth.plugin import cmd_del

    cmd_del(req)


# -- bridge (ipMasq) ------------------------------------------------------------------------------

def _bridge_addresses(req: Request) -> list[str]:
    prev = req.prev_result
    return [ip.address for ip in prev.ips] if prev is not None else []


def _bridge_applies(req: Request) -> bool:
    from cnichain.plugins.bridge.config import load

    cfg = load(req.conf, req.args, with_mac=False)
    return cfg.ip_masq and cfg.is_layer3 and bool(_bridge_addresses(req))


def _bridge_check(req: Request) -> Optional[str]:
    from cnichain.plugins.bridge import kernel

    have = kernel.masquerade_addresses(req.network_name, req.container_id, req.ifname)
    want = {a.split("/")[0] for a in _bridge_addresses(req)}
    missing = sorted(want - {a.split("/")[0] for a in have or []})
    return f"masquerade rules missing for {', '.join(missing)}" if missing else None


def _bridge_repair(req: Request) -> None:
    from cnichain.plugins.bridge import kernel

    kernel.add_masquerade(req.network_name, req.container_id, req.ifname, _bridge_addresses(req))


def _bridge_undo(req: Request) -> None:
    from cnichain.plugins.bridge import kernel

    kernel.remove_masquerade(req.network_name, req.container_id, req.ifname)


REPAIRERS = {
    r.plugin_type: r
    for r in (
        Repairer("portmap", frozenset({ev.NFT}), _portmap_applies, _portmap_check, _portmap_repair, _portmap_undo),
        Repairer("bandwidth", frozenset({ev.TC}), _bandwidth_applies, _bandwidth_check, _bandwidth_repair,
                 _bandwidth_undo),
        Repairer("bridge", frozenset({ev.NFT}), _bridge_applies, _bridge_check, _bridge_repair, _bridge_undo),
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
