"""bandwidth: shape a pod's traffic with token buckets on the host side of its veth.

Drop-in for containernetworking/plugins' ``bandwidth`` (same config keys, capability, kernel
layout and IFB names).  Differences, all on purpose:

* a failed ADD removes what it created instead of leaving a half-shaped pod;
* DEL also removes the qdiscs on a host veth that still exists, not only the IFB, and needs
  neither ``CNI_NETNS`` nor ``prevResult`` for the IFB;
* CHECK succeeds when nothing is configured (the reference crashes: upstream #1221) and also
  verifies the ingress qdisc and the redirect filter;
* GC (CNI 1.1) deletes IFBs this plugin created for attachments the runtime no longer lists;
* overflowing burst arithmetic saturates instead of wrapping (see plan.py).
"""

from __future__ import annotations

import errno

from cnichain.common import version as versions
from cnichain.common.errors import CniError, plugin_error
from cnichain.common.kernel_errors import KernelError
from cnichain.common.log import log
from cnichain.common.netns import NetnsGone
from cnichain.common.rollback import Rollback
from cnichain.common.skel import Plugin, Request
from cnichain.common.types import Interface, Result

from . import plan
from .config import IFB_PREFIX, BandwidthConfig, ifb_name, load

TYPE_CHECKING = False
if TYPE_CHECKING:  # annotations only
    from typing import Any, Optional

PSCHED = "/proc/net/psched"


def _tick() -> float:
    try:
        with open(PSCHED, "rb") as fh:  # bytes: a text-mode open would import a codec module
            return plan.tick_in_usec(fh.read().decode("ascii", "replace"))
    except OSError as exc:
        raise plugin_error(f"cannot read {PSCHED}: {exc.strerror}") from None


def _plans(cfg: BandwidthConfig, tick: float) -> tuple[Optional[plan.TbfParams], Optional[plan.TbfParams]]:
    ingress = plan.tbf(cfg.ingress, tick, "ingress") if cfg.ingress else None
    egress = plan.tbf(cfg.egress, tick, "egress") if cfg.egress else None
    return ingress, egress


def _ifb_alias(req: Request) -> str:
    """Marks the IFB as ours and names its attachment, so GC can tell whose it is."""
    from .kernel import ifb_alias

    return ifb_alias(req.network_name, req.container_id)


def _host_veth(host: Any, req: Request, prev: Result) -> Any:
    """The host-side veth of CNI_IFNAME, which must be a non-sandbox interface of prevResult."""
    from . import kernel

    if not prev.interfaces:
        raise plugin_error("no interfaces provided")
    peer = kernel.veth_peer_index(req.netns, req.ifname)
    link = kernel.host_veth_by_peer(host, peer)
    if prev.find_interface(link.name, in_sandbox=False) is None:
        raise plugin_error("no veth peer of container interface found in host ns")
    return link


# -- ADD ---------------------------------------------------------------------------------------

def cmd_add(req: Request) -> Result:
    cfg = load(req.conf)
    prev = req.prev_result
    if not cfg.shaped:
        # Nothing to shape: pass the previous result through, touch nothing (no pyroute2 import).
        if prev is None:
            raise plugin_error("must be called as chained plugin")
        return prev
    if prev is None:
        raise plugin_error("must be called as chained plugin")
    ingress, egress = _plans(cfg, _tick())

    from cnichain.common import netlink

    with netlink.route_socket() as host:
        veth = _host_veth(host, req, prev)
        try:
            _shape(host, req, veth, ingress, egress, prev)
        except KernelError as exc:
            if exc.errno != errno.EEXIST:
                raise
            # Our own shaping of this attachment is there already: an earlier ADD was killed
            # before it answered (the shim then runs the request again).  Redo it from scratch.
            _remove_own_shaping(host, req, veth)
            _shape(host, req, veth, ingress, egress, prev)
    log.info(f"shaped {veth.name}: ingress={cfg.ingress} egress={cfg.egress} ({cfg.source})")
    return prev


def _shape(host: Any, req: Request, veth: Any, ingress: Optional[plan.TbfParams],
           egress: Optional[plan.TbfParams], prev: Result) -> None:
    """The TBF on the host veth and the IFB with its redirect, all or nothing."""
    from . import kernel

    with Rollback() as undo:
        if ingress is not None:
            kernel.add_tbf(host, veth.index, ingress)
            undo.push("tbf", kernel.delete_qdisc, host, veth.index, kernel.TBF_HANDLE, kernel.TC_H_ROOT)
        if egress is not None:
            name = ifb_name(req.network_name, req.container_id)
            ifb = kernel.create_ifb(host, name, veth.mtu)
            undo.push("ifb link", kernel.delete_link, host, ifb.index)
            try:
                kernel.add_tbf(host, ifb.index, egress)
            except KernelError as exc:
                raise exc.rewrap(f"create ifb qdisc: {exc.context}") from None  # as the reference nests it
            kernel.ifb_up(host, ifb, _ifb_alias(req))
            # The redirect goes in last: no packet reaches the IFB before it is shaped.
            kernel.add_ingress_qdisc(host, veth.index)
            undo.push("ingress", kernel.delete_qdisc, host, veth.index, kernel.INGRESS_HANDLE, kernel.TC_H_INGRESS)
            kernel.add_redirect(host, veth.index, ifb.index)
            prev.interfaces.append(Interface(name=ifb.name, mac=ifb.mac))


def _remove_own_shaping(host: Any, req: Request, veth: Any) -> None:
    """What this attachment's DEL removes: the veth's shaping and the IFB named for it."""
    from . import kernel

    ifb = kernel.get_link(host, name=ifb_name(req.network_name, req.container_id))
    removed = kernel.remove_shaping(host, veth, ifb.index if ifb else None)
    if (ifb is not None and kernel.has_ingress_qdisc(host, veth.index)
            and not kernel.redirect_targets(host, veth.index)):
        # An ingress qdisc still without its redirect next to our IFB: the killed ADD's, added
        # just before it (one that is there without our IFB is someone else's, and stays).
        if kernel.delete_qdisc(host, veth.index, kernel.INGRESS_HANDLE, kernel.TC_H_INGRESS):
            removed.append(f"ingress qdisc on {veth.name}")
    if ifb is not None:
        kernel.delete_link(host, ifb.index)
        removed.append(ifb.name)
    log.info(f"redoing the shaping of {veth.name}: removed {', '.join(removed) or 'nothing'} an earlier ADD left")


# -- DEL ---------------------------------------------------------------------------------------

def cmd_del(req: Request) -> None:
    try:
        load(req.conf)
    except CniError as exc:  # DEL needs no key of it: clean up anyway (the reference would fail)
        log.skipped("DEL", [f"the bandwidth keys ({exc.msg})"])
    prev = req.prev_result
    name = ifb_name(req.network_name, req.container_id)

    from cnichain.common import netlink

    from . import kernel

    with netlink.route_socket() as host:
        ifb = kernel.get_link(host, name=name)
        veths = _veths_for_del(host, req, prev)
        if not veths and ifb is not None:
            veths = kernel.veths_redirecting_to(host, ifb.index)
        for veth in veths:
            removed = kernel.remove_shaping(host, veth, ifb.index if ifb else None)
            if removed:
                log.info(f"removed {', '.join(removed)}")
        if ifb is not None:
            kernel.delete_link(host, ifb.index)
            log.info(f"deleted {name}")
    return None


def _veths_for_del(host: Any, req: Request, prev: Optional[Result]) -> list[Any]:
    """The pod's host veth if it still exists: from the pod side when possible, else prevResult.

    Nothing here is required: a pod whose namespace or veth is gone has nothing left to unshape.
    """
    from . import kernel

    if req.netns:
        try:
            peer = kernel.veth_peer_index(req.netns, req.ifname)
            link = kernel.get_link(host, index=peer)
            if link is not None and link.kind == "veth":
                if prev is None or prev.find_interface(link.name, in_sandbox=False) is not None:
                    return [link]
        except NetnsGone:
            pass
        except CniError:
            pass  # no such interface in the pod any more
    if prev is None:
        return []
    names = [i.name for i in prev.interfaces if not i.sandbox and not i.name.startswith(IFB_PREFIX)]
    return kernel.iter_candidates(host, names)


# -- CHECK -------------------------------------------------------------------------------------

def cmd_check(req: Request) -> None:
    cfg = load(req.conf)
    prev = req.prev_result
    if prev is None:
        raise plugin_error("must be called as a chained plugin")
    if not cfg.shaped:
        return None
    tick = _tick()

    from cnichain.common import netlink

    from . import kernel

    with netlink.route_socket() as host:
        veth = _host_veth(host, req, prev)
        if cfg.ingress is not None:
            _check_tbf(host, veth, plan.accepted(cfg.ingress, tick))
        if cfg.egress is not None:
            name = ifb_name(req.network_name, req.container_id)
            ifb = kernel.get_link(host, name=name)
            if ifb is None:
                raise plugin_error("get ifb device: Link not found", name)
            _check_tbf(host, ifb, plan.accepted(cfg.egress, tick))
            if not kernel.has_ingress_qdisc(host, veth.index):
                raise plugin_error(f"Failed to find ingress qdisc on {veth.name}")
            if ifb.index not in kernel.redirect_targets(host, veth.index):
                raise plugin_error(f"Failed to find filter redirecting {veth.name} to {name}")
    return None


def _check_tbf(host: Any, link: Any, accepted: tuple[plan.TbfParams, ...]) -> None:
    from . import kernel

    q = kernel.root_tbf(host, link.index)
    if q is None or q.tbf is None:
        raise plugin_error("Failed to find qdisc", link.name)
    want = accepted[0]
    got = q.tbf
    if got in accepted:
        return
    for field, label in (("rate", "Rate"), ("limit", "Limit"), ("buffer", "Buffer")):
        if all(getattr(got, field) != getattr(a, field) for a in accepted):
            raise plugin_error(
                f"{label} doesn't match",
                f"{link.name}: {field} is {getattr(got, field)}, expected {getattr(want, field)}",
            )
    raise plugin_error("Rate, Limit and Buffer don't match together", link.name)


# -- GC ----------------------------------------------------------------------------------------

def cmd_gc(req: Request) -> None:
    """Delete IFBs this plugin made for this network whose attachment the runtime no longer lists.

    Only IFBs carrying our alias are considered (the reference's carry none, and the alias names
    the network), so IFBs of other networks and of other tools are never touched.
    """
    load(req.conf)
    valid = {cid for cid, _ in req.valid_attachments()}

    from cnichain.common import netlink

    from . import kernel

    prefix = f"{kernel.IFB_ALIAS_PREFIX} net={req.network_name} id="
    with netlink.route_socket() as host:
        for link in kernel.ifb_links(host):
            if not link.alias.startswith(prefix):
                continue
            cid = link.alias[len(prefix):]
            if cid in valid or link.name != ifb_name(req.network_name, cid):
                continue
            # A leaked veth still redirecting to the IFB would blackhole once the IFB is gone.
            for veth in kernel.veths_redirecting_to(host, link.index):
                kernel.remove_shaping(host, veth, link.index)
            kernel.delete_link(host, link.index)
            log.info(f"gc: deleted {link.name} of {cid}")
    return None


PLUGIN = Plugin(
    name="bandwidth",
    add=cmd_add,
    delete=cmd_del,
    check=cmd_check,
    gc=cmd_gc,
    versions=versions.starting_from("0.3.0"),
    about="CNI bandwidth plugin (cnichain)",
)
