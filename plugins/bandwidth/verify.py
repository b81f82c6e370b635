"""What bandwidth's CHECK reads back: each direction's root TBF (with the child qdisc under it),
the pod's clsact and redirect, the IFB, where the layout ADD recorded puts them.

Accepts the reference's and our previous release's parameters for the same limits
(:func:`.plan.accepted`), so a live pod shaped before an upgrade keeps passing.
"""

from __future__ import annotations

from cnichain.common.errors import plugin_error
from cnichain.common.skel import Request
from cnichain.common.types import Result

from . import plan
from .config import BandwidthConfig, Shape

TYPE_CHECKING = False
if TYPE_CHECKING:  # annotations only
    from typing import Any


def host_veth(host: Any, req: Request, prev: Result) -> Any:
    """The host-side veth of CNI_IFNAME, which must be a non-sandbox interface of prevResult."""
    from . import kernel

    if not prev.interfaces:
        raise plugin_error("no interfaces provided")
    peer = kernel.veth_peer_index(req.netns, req.ifname)
    link = kernel.host_veth_by_peer(host, peer)
    if prev.find_interface(link.name, in_sandbox=False) is None:
        raise plugin_error("no veth peer of container interface found in host ns")
    return link


def check_pod(pod: Any, req: Request, cfg: BandwidthConfig, layout: plan.Layout, tick: float, name: str) -> None:
    """The pod-side halves: root TBF of the pod's interface; clsact, redirect and shaped IFB."""
    from . import kernel

    link = kernel.get_link(pod, name=req.ifname)
    if link is None:
        raise plugin_error(f"container interface {req.ifname}: Link not found")
    if cfg.egress is not None and layout.egress == "pod":
        check_tbf(pod, link, cfg.egress, tick)
    if cfg.ingress is not None and layout.ingress == "pod":
        ifb = kernel.get_link(pod, name=name)
        if ifb is None:
            raise plugin_error("get ifb device: Link not found", f"{name} in the pod")
        check_tbf(pod, ifb, cfg.ingress, tick)
        if not any(q.kind == "clsact" for q in kernel.qdiscs(pod, link.index) if q.parent == kernel.TC_H_INGRESS):
            raise plugin_error(f"Failed to find clsact qdisc on {req.ifname}")
        if ifb.index not in kernel.pod_redirect_targets(pod, link.index):
            raise plugin_error(f"Failed to find filter redirecting {req.ifname} to {name}")


def check_tbf(host: Any, link: Any, shape: Shape, tick: float) -> None:
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
        check_child(link, next((c for c in present if c.parent == kernel.TBF_CLASS), None), got)
        return
    for field, label in (("rate", "Rate"), ("limit", "Limit"), ("buffer", "Buffer")):
        if all(getattr(got, field) != getattr(a, field) for a in accepted):
            raise plugin_error(
                f"{label} doesn't match",
                f"{link.name}: {field} is {getattr(got, field)}, expected {getattr(want, field)}",
            )
    raise plugin_error("Rate, Limit and Buffer don't match together", link.name)


def check_child(link: Any, child: Any, tbf: plan.TbfParams) -> None:
    """Under the TBF: its own FIFO (a kernel without fq_codel, or a pod shaped by the reference or
    our previous release), or exactly the fq_codel ADD grafts there; anything else is not ours."""
    from . import kernel

    if child is None:
        return
    want = plan.aqm(tbf, link.mtu)
    if child.kind != kernel.AQM_KIND or child.aqm not in (want, plan.aqm_as_read_back(want)):
        raise plugin_error("Child qdisc doesn't match",
                           f"{link.name}: {child.kind} {child.aqm}, expected {kernel.AQM_KIND} {want}")
