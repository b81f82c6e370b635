"""bandwidth's layouts built and taken apart: one pod's buckets put where :func:`.plan.choose_layout`
says (the host veth's root, the pod interface's root, an IFB in either namespace), all or nothing,
and everything of ours -- any layout's, the reference's too -- removed for an attachment.

The conductor between the handlers (:mod:`.plugin`) and the kernel (:mod:`.kernel`): ADD, the
redo of an ADD a kill interrupted, DEL and the reconciler's repair all go through here.
"""

from __future__ import annotations

from cnichain.common.errors import CniError
from cnichain.common.kernel_errors import KernelError
from cnichain.common.netns import NetnsGone
from cnichain.common.rollback import Rollback
from cnichain.common.skel import Request
from cnichain.common.types import Interface, Result

from . import plan
from .config import IFB_PREFIX, ifb_name

TYPE_CHECKING = False
if TYPE_CHECKING:  # annotations only
    from typing import Any, Optional


def ifb_alias_of(req: Request) -> str:
    """Marks the IFB as ours and names its attachment, so GC can tell whose it is."""
    from .kernel import ifb_alias

    return ifb_alias(req.network_name, req.container_id)


def find_host_veth(host: Any, req: Request, pod_link: Any, prev: Result) -> tuple[Any, str]:
    """(host veth, "") of the pod's interface ``pod_link``, or (None, why there is none).

    The host veth is the peer of a veth, in the host namespace, pointing back at the pod's
    interface (:func:`_peer_in_host`), and listed in prevResult as a non-sandbox interface, as
    the reference requires.
    """
    head = f"container interface {req.ifname} has no veth peer: "
    if pod_link.kind != "veth":
        return None, head + f'interface "{req.ifname}" was not a veth interface'
    if pod_link.peer <= 0:
        return None, head + "no peer index"
    link = _peer_in_host(host, pod_link)
    if link is None:
        return None, f"veth peer with index {pod_link.peer} is not in host ns"
    if prev.find_interface(link.name, in_sandbox=False) is None:
        return None, "no veth peer of container interface found in host ns"
    return link, ""


def _peer_in_host(host: Any, pod_link: Any) -> Any:
    """The veth in the host namespace at the pod interface's peer index that points back at it (a
    link in a third namespace with a clashing ifindex is not it), or None."""
    from . import kernel

    link = kernel.get_link(host, index=pod_link.peer)
    return link if link is not None and link.kind == "veth" and link.peer == pod_link.index else None


def shape(host: Any, pod: Any, req: Request, wanted: str, pod_link: Any, veth: Any, why: str,
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
            ifb = add_ifb(pod, undo, name, pod_link.mtu, ingress, ifb_alias_of(req))
            if kernel.add_clsact(pod, pod_link.index):
                undo.push("clsact", kernel.delete_qdisc, pod, pod_link.index, kernel.INGRESS_HANDLE,
                          kernel.TC_H_INGRESS)
            kernel.add_pod_redirect(pod, pod_link.index, ifb.index)
            undo.push("redirect", kernel.delete_filters, pod, pod_link.index, kernel.CLSACT_INGRESS,
                      kernel.FILTER_PRIO, "u32")
            prev.interfaces.append(Interface(name=ifb.name, mac=ifb.mac, sandbox=req.netns))
        if egress is not None and layout.egress == "host":
            ifb = add_ifb(host, undo, name, veth.mtu, egress, ifb_alias_of(req))
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


def add_ifb(ns: Any, undo: Rollback, name: str, mtu: int, params: plan.TbfParams, alias: str) -> Any:
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


def remove_own_state(host: Any, pod: Any, req: Request, prev: Optional[Result], pod_link: Any,
                      name: str) -> list[str]:
    """Remove what any layout of ours (and the reference's) made for this attachment; what went.

    DEL's work, and a repeated ADD's first step when a killed ADD left its shaping behind.  Only
    our handles, our filter and the IFB named for this attachment: another tool's state stays.
    """
    from . import kernel

    ifb = kernel.get_link(host, name=name)
    if ifb is not None and ifb.kind != "ifb":
        ifb = None  # a link of another kind under our IFB's name is not ours
    veths = veths_for_del(host, req, prev, pod_link)
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


def pod_socket(req: Request) -> Any:
    """A socket in the pod's namespace, or None when there is none (any more): nothing to undo."""
    from cnichain.common import netlink

    if not req.netns:
        return None
    try:
        return netlink.route_socket(req.netns)
    except (NetnsGone, CniError):
        return None


def veths_for_del(host: Any, req: Request, prev: Optional[Result], pod_link: Any) -> list[Any]:
    """The pod's host veth if it still exists: from the pod side when possible, else prevResult.

    Nothing here is required: a pod whose namespace or veth is gone has nothing left to unshape.
    """
    from . import kernel

    if pod_link is not None and pod_link.kind == "veth" and pod_link.peer > 0:
        link = _peer_in_host(host, pod_link)
        if link is not None and (prev is None or prev.find_interface(link.name, in_sandbox=False) is not None):
            return [link]
    if prev is None:
        return []
    names = [i.name for i in prev.interfaces if not i.sandbox and not i.name.startswith(IFB_PREFIX)]
    return kernel.iter_candidates(host, names)


def layout_of(prev: Result, network: str, container_id: str) -> plan.Layout:
    """The layout ADD built for this attachment, as its result records it."""
    return plan.layout_in_result([(i.name, i.sandbox) for i in prev.interfaces], ifb_name(network, container_id))
