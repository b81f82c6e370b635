"""bandwidth: shape a pod's traffic with token buckets, on whichever side of its link is free.

Drop-in for containernetworking/plugins' ``bandwidth`` (same config keys, capability and IFB
names; layout ``host`` is the reference's kernel layout).  Differences, all on purpose:

* where the buckets go is chosen per pod (plan.choose_layout, docs/plugins.md): by default the
  host veth's root TBF for traffic into the pod and the pod interface's root TBF for traffic out
  of it, so neither tc hook of the host veth is taken (eBPF dataplanes attach there, before or
  after us) and no IFB is needed; everything inside the pod when there is no host veth (macvlan,
  ipvlan, host-device) or another tool uses it; ``"layout": "host"`` forces the reference's;
* a failed ADD removes what it created instead of leaving a half-shaped pod;
* DEL removes every layout's state that is ours (the reference's too), on a host veth and in a pod
  that still exist, and needs neither ``CNI_NETNS`` nor ``prevResult`` for the host IFB;
* CHECK succeeds when nothing is configured (the reference crashes: upstream #1221), verifies the
  layout the result says ADD built, and also the ingress qdisc and the redirect filter;
* GC (CNI 1.1) deletes IFBs this plugin created for attachments the runtime no longer lists;
* a runtime's "no burst" sentinel (containerd's, CRI-O's) or a burst too large to mean anything
  gets a small bucket derived from the rate, and the queue is bounded in time, not by the burst
  (plan.py): the rate holds from the first byte and latency under load stays low; CHECK still
  accepts the reference's (and our previous release's) parameters for live pods.
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
from .config import IFB_PREFIX, BandwidthConfig, Shape, ifb_name, load

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


def _plans(cfg: BandwidthConfig, tick: float, mtu: int = plan.DEFAULT_MTU
           ) -> tuple[Optional[plan.TbfParams], Optional[plan.TbfParams]]:
    """Both directions' TBF parameters on a link of ``mtu``; refuses what the kernel cannot hold.
    ADD calls it before touching the kernel, then again with the MTU of the pod's link."""
    ingress = plan.tbf(cfg.ingress, tick, "ingress", mtu) if cfg.ingress else None
    egress = plan.tbf(cfg.egress, tick, "egress", mtu) if cfg.egress else None
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


def _find_host_veth(host: Any, req: Request, pod_link: Any, prev: Result) -> tuple[Any, str]:
    """(host veth, "") of the pod's interface ``pod_link``, or (None, why there is none).

    The host veth is the peer of a veth, in the host namespace, pointing back at the pod's
    interface (so a peer in a third namespace with a clashing ifindex is not taken for it), and
    listed in prevResult as a non-sandbox interface, as the reference requires.
    """
    from . import kernel

    head = f"container interface {req.ifname} has no veth peer: "
    if pod_link.kind != "veth":
        return None, head + f'interface "{req.ifname}" was not a veth interface'
    if pod_link.peer <= 0:
        return None, head + "no peer index"
    link = kernel.get_link(host, index=pod_link.peer)
    if link is None or link.kind != "veth" or link.peer != pod_link.index:
        return None, f"veth peer with index {pod_link.peer} is not in host ns"
    if prev.find_interface(link.name, in_sandbox=False) is None:
        return None, "no veth peer of container interface found in host ns"
    return link, ""


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
    if not prev.interfaces:
        raise plugin_error("no interfaces provided")
    tick = _tick()
    _plans(cfg, tick)  # bad numbers are refused before any kernel access

    from cnichain.common import netlink

    from . import kernel

    name = ifb_name(req.network_name, req.container_id)
    with netlink.route_socket() as host, netlink.route_socket(req.netns) as pod:
        pod_link = kernel.get_link(pod, name=req.ifname)
        if pod_link is None:
            raise plugin_error(f"container interface {req.ifname} has no veth peer: Link not found")
        # The pod's link, its host veth and the IFB share one MTU (the IFB is made with it).
        ingress, egress = _plans(cfg, tick, pod_link.mtu)
        veth, why = _find_host_veth(host, req, pod_link, prev)
        try:
            layout = _shape(host, pod, req, cfg.layout, pod_link, veth, why, ingress, egress, prev)
        except (KernelError, CniError) as exc:
            if isinstance(exc, KernelError) and exc.errno != errno.EEXIST:
                raise
            # A link "in use" (file exists, or a forced layout's host veth held) may be held by
            # this attachment's own shaping: an earlier ADD was killed before it answered and the
            # shim runs the request again.  What its DEL would remove goes and the shaping is
            # built again from scratch; when nothing of ours was there, the error stands.
            removed = _remove_own_state(host, pod, req, prev, pod_link, name)
            if not removed:
                raise
            log.info(f"redoing the shaping: removed {', '.join(removed)} an earlier ADD left")
            prev.interfaces = [i for i in prev.interfaces if i.name != name]
            layout = _shape(host, pod, req, cfg.layout, pod_link, veth, why, ingress, egress, prev)
    where = f"{veth.name}/{req.ifname}" if veth is not None else req.ifname
    log.info(f"shaped {where} (layout {layout.name}): ingress={cfg.ingress} egress={cfg.egress} ({cfg.source})")
    return prev


def _shape(host: Any, pod: Any, req: Request, wanted: str, pod_link: Any, veth: Any, why: str,
           ingress: Optional[plan.TbfParams], egress: Optional[plan.TbfParams], prev: Result) -> plan.Layout:
    """Build the layout ``wanted`` resolves to for this pod, all or nothing; returns it."""
    from . import kernel

    name = ifb_name(req.network_name, req.container_id)
    side = kernel.host_side(host, veth, why, own_root=ingress)
    layout = plan.choose_layout(wanted, side, ingress is not None, egress is not None)
    with Rollback() as undo:
        if ingress is not None and layout.ingress == "host":
            kernel.add_tbf(host, veth.index, ingress)
            undo.push("tbf", kernel.delete_qdisc, host, veth.index, kernel.TBF_HANDLE, kernel.TC_H_ROOT)
            kernel.add_aqm(host, veth.index, plan.aqm(ingress, veth.mtu))
        elif ingress is not None:
            ifb = _add_ifb(pod, undo, name, pod_link.mtu, ingress, _ifb_alias(req))
            if kernel.add_clsact(pod, pod_link.index):
                undo.push("clsact", kernel.delete_qdisc, pod, pod_link.index, kernel.INGRESS_HANDLE,
                          kernel.TC_H_INGRESS)
            kernel.add_pod_redirect(pod, pod_link.index, ifb.index)
            undo.push("redirect", kernel.delete_filters, pod, pod_link.index, kernel.CLSACT_INGRESS,
                      kernel.FILTER_PRIO, "u32")
            prev.interfaces.append(Interface(name=ifb.name, mac=ifb.mac, sandbox=req.netns))
        if egress is not None and layout.egress == "host":
            ifb = _add_ifb(host, undo, name, veth.mtu, egress, _ifb_alias(req))
            # The redirect goes in last: no packet reaches the IFB before it is shaped.
            kernel.add_ingress_qdisc(host, veth.index)
            undo.push("ingress", kernel.delete_qdisc, host, veth.index, kernel.INGRESS_HANDLE, kernel.TC_H_INGRESS)
            kernel.add_redirect(host, veth.index, ifb.index)
            prev.interfaces.append(Interface(name=ifb.name, mac=ifb.mac))
        elif egress is not None:
            kernel.add_tbf(pod, pod_link.index, egress)
            undo.push("tbf", kernel.delete_qdisc, pod, pod_link.index, kernel.TBF_HANDLE, kernel.TC_H_ROOT)
            kernel.add_aqm(pod, pod_link.index, plan.aqm(egress, pod_link.mtu))
    return layout


def _add_ifb(ns: Any, undo: Rollback, name: str, mtu: int, params: plan.TbfParams, alias: str) -> Any:
    """The IFB ``name`` in ``ns``'s namespace, shaped by ``params`` while still down, then up."""
    from . import kernel

    ifb = kernel.create_ifb(ns, name, mtu)
    undo.push("ifb link", kernel.delete_link, ns, ifb.index)
    try:
        kernel.add_tbf(ns, ifb.index, params)
        kernel.add_aqm(ns, ifb.index, plan.aqm(params, mtu))
    except KernelError as exc:
        raise exc.rewrap(f"create ifb qdisc: {exc.context}") from None  # as the reference nests it
    kernel.ifb_up(ns, ifb, alias)
    return ifb


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
        pod = _pod_socket(req)
        try:
            pod_link = kernel.get_link(pod, name=req.ifname) if pod is not None else None
            removed = _remove_own_state(host, pod, req, prev, pod_link, name)
            if removed:
                log.info(f"removed {', '.join(removed)}")
        finally:
            if pod is not None:
                pod.close()
    return None


def _remove_own_state(host: Any, pod: Any, req: Request, prev: Optional[Result], pod_link: Any,
                      name: str) -> list[str]:
    """Remove what any layout of ours (and the reference's) made for this attachment; what went.

    DEL's work, and a repeated ADD's first step when a killed ADD left its shaping behind.  Only
    our handles, our filter and the IFB named for this attachment: another tool's state stays.
    """
    from . import kernel

    ifb = kernel.get_link(host, name=name)
    if ifb is not None and ifb.kind != "ifb":
        ifb = None  # a link of another kind under our IFB's name is not ours
    veths = _veths_for_del(host, req, prev, pod_link)
    if not veths and ifb is not None:
        veths = kernel.veths_redirecting_to(host, ifb.index)
    removed = []
    for veth in veths:
        removed += kernel.remove_shaping(host, veth, ifb.index if ifb else None)
        if (ifb is not None and kernel.has_ingress_qdisc(host, veth.index)
                and not kernel.redirect_targets(host, veth.index)):
            # An ingress qdisc still without its redirect next to our IFB: a killed ADD's, added
            # just before the redirect (one there without our IFB is someone else's, and stays).
            if kernel.delete_qdisc(host, veth.index, kernel.INGRESS_HANDLE, kernel.TC_H_INGRESS):
                removed.append(f"ingress qdisc on {veth.name}")
    if ifb is not None:
        kernel.delete_link(host, ifb.index)
        removed.append(name)
    if pod_link is not None:
        removed += kernel.remove_pod_shaping(pod, pod_link, name)
    elif pod is not None:  # the interface is gone, the namespace is not: an IFB of ours may be
        stray = kernel.get_link(pod, name=name)
        if stray is not None and stray.kind == "ifb":
            kernel.delete_link(pod, stray.index)
            removed.append(f"{name} in the pod")
    return removed


def _pod_socket(req: Request) -> Any:
    """A socket in the pod's namespace, or None when there is none (any more): nothing to undo."""
    from cnichain.common import netlink

    if not req.netns:
        return None
    try:
        return netlink.route_socket(req.netns)
    except (NetnsGone, CniError):
        return None


def _veths_for_del(host: Any, req: Request, prev: Optional[Result], pod_link: Any) -> list[Any]:
    """The pod's host veth if it still exists: from the pod side when possible, else prevResult.

    Nothing here is required: a pod whose namespace or veth is gone has nothing left to unshape.
    """
    from . import kernel

    if pod_link is not None and pod_link.kind == "veth" and pod_link.peer > 0:
        link = kernel.get_link(host, index=pod_link.peer)
        if link is not None and link.kind == "veth" and link.peer == pod_link.index:
            if prev is None or prev.find_interface(link.name, in_sandbox=False) is not None:
                return [link]
    if prev is None:
        return []
    names = [i.name for i in prev.interfaces if not i.sandbox and not i.name.startswith(IFB_PREFIX)]
    return kernel.iter_candidates(host, names)


# -- CHECK -------------------------------------------------------------------------------------

def layout_of(prev: Result, network: str, container_id: str) -> plan.Layout:
    """The layout ADD built for this attachment, as its result records it."""
    return plan.layout_in_result([(i.name, i.sandbox) for i in prev.interfaces], ifb_name(network, container_id))


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

    name = ifb_name(req.network_name, req.container_id)
    layout = layout_of(prev, req.network_name, req.container_id)
    with netlink.route_socket() as host:
        if cfg.ingress is not None and layout.ingress == "host":
            _check_tbf(host, _host_veth(host, req, prev), cfg.ingress, tick)
        if cfg.egress is not None and layout.egress == "host":
            veth = _host_veth(host, req, prev)
            ifb = kernel.get_link(host, name=name)
            if ifb is None:
                raise plugin_error("get ifb device: Link not found", name)
            _check_tbf(host, ifb, cfg.egress, tick)
            if not kernel.has_ingress_qdisc(host, veth.index):
                raise plugin_error(f"Failed to find ingress qdisc on {veth.name}")
            if ifb.index not in kernel.redirect_targets(host, veth.index):
                raise plugin_error(f"Failed to find filter redirecting {veth.name} to {name}")
    if (cfg.ingress is not None and layout.ingress == "pod") or (cfg.egress is not None and layout.egress == "pod"):
        with netlink.route_socket(req.netns) as pod:
            _check_pod(pod, req, cfg, layout, tick, name)
    return None


def _check_pod(pod: Any, req: Request, cfg: BandwidthConfig, layout: plan.Layout, tick: float, name: str) -> None:
    """The pod-side halves: root TBF of the pod's interface; clsact, redirect and shaped IFB."""
    from . import kernel

    link = kernel.get_link(pod, name=req.ifname)
    if link is None:
        raise plugin_error(f"container interface {req.ifname}: Link not found")
    if cfg.egress is not None and layout.egress == "pod":
        _check_tbf(pod, link, cfg.egress, tick)
    if cfg.ingress is not None and layout.ingress == "pod":
        ifb = kernel.get_link(pod, name=name)
        if ifb is None:
            raise plugin_error("get ifb device: Link not found", f"{name} in the pod")
        _check_tbf(pod, ifb, cfg.ingress, tick)
        if not any(q.kind == "clsact" for q in kernel.qdiscs(pod, link.index) if q.parent == kernel.TC_H_INGRESS):
            raise plugin_error(f"Failed to find clsact qdisc on {req.ifname}")
        if ifb.index not in kernel.pod_redirect_targets(pod, link.index):
            raise plugin_error(f"Failed to find filter redirecting {req.ifname} to {name}")


def _check_tbf(host: Any, link: Any, shape: Shape, tick: float) -> None:
    """The root TBF of ``link`` holds what ADD writes for ``shape`` on a link of its MTU, or what
    the reference or our previous release wrote (plan.accepted): a live pod shaped before an
    upgrade keeps passing, and gets the new parameters at its next ADD."""
    from . import kernel

    accepted = plan.accepted(shape, tick, link.mtu)

    present = kernel.qdiscs(host, link.index)
    q = next((q for q in present if q.kind == "tbf" and q.parent == kernel.TC_H_ROOT), None)
    if q is None or q.tbf is None:
        raise plugin_error("Failed to find qdisc", link.name)
    want = accepted[0]
    got = q.tbf
    if got in accepted:
        _check_child(link, next((c for c in present if c.parent == kernel.TBF_CLASS), None), got)
        return
    for field, label in (("rate", "Rate"), ("limit", "Limit"), ("buffer", "Buffer")):
        if all(getattr(got, field) != getattr(a, field) for a in accepted):
            raise plugin_error(
                f"{label} doesn't match",
                f"{link.name}: {field} is {getattr(got, field)}, expected {getattr(want, field)}",
            )
    raise plugin_error("Rate, Limit and Buffer don't match together", link.name)


def _check_child(link: Any, child: Any, tbf: plan.TbfParams) -> None:
    """Under the TBF: its own FIFO (a kernel without fq_codel, or a pod shaped by the reference or
    our previous release), or exactly the fq_codel ADD grafts there; anything else is not ours."""
    from . import kernel

    if child is None:
        return
    want = plan.aqm(tbf, link.mtu)
    if child.kind != kernel.AQM_KIND or child.aqm not in (want, plan.aqm_as_read_back(want)):
        raise plugin_error("Child qdisc doesn't match",
                           f"{link.name}: {child.kind} {child.aqm}, expected {kernel.AQM_KIND} {want}")


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
