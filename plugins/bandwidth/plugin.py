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
from cnichain.common.skel import Plugin, Request
from cnichain.common.types import Result

from . import layouts, plan, verify
from .config import BandwidthConfig, ifb_name, load

TYPE_CHECKING = False
if TYPE_CHECKING:  # annotations only
    from typing import Optional

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
        veth, why = layouts.find_host_veth(host, req, pod_link, prev)
        try:
            layout = layouts.shape(host, pod, req, cfg.layout, pod_link, veth, why, ingress, egress, prev)
        except (KernelError, CniError) as exc:
            if isinstance(exc, KernelError) and exc.errno != errno.EEXIST:
                raise
            # A link "in use" (file exists, or a forced layout's host veth held) may be held by
            # this attachment's own shaping: an earlier ADD was killed before it answered and the
            # shim runs the request again.  What its DEL would remove goes and the shaping is
            # built again from scratch; when nothing of ours was there, the error stands.
            removed = layouts.remove_own_state(host, pod, req, prev, pod_link, name)
            if not removed:
                raise
            log.info(f"redoing the shaping: removed {', '.join(removed)} an earlier ADD left")
            prev.interfaces = [i for i in prev.interfaces if i.name != name]
            layout = layouts.shape(host, pod, req, cfg.layout, pod_link, veth, why, ingress, egress, prev)
    where = f"{veth.name}/{req.ifname}" if veth is not None else req.ifname
    log.info(f"shaped {where} (layout {layout.name}): ingress={cfg.ingress} egress={cfg.egress} ({cfg.source})")
    return prev


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
        pod = layouts.pod_socket(req)
        try:
            pod_link = kernel.get_link(pod, name=req.ifname) if pod is not None else None
            removed = layouts.remove_own_state(host, pod, req, prev, pod_link, name)
            if removed:
                log.info(f"removed {', '.join(removed)}")
        finally:
            if pod is not None:
                pod.close()
    return None


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

    name = ifb_name(req.network_name, req.container_id)
    layout = layouts.layout_of(prev, req.network_name, req.container_id)
    with netlink.route_socket() as host:
        if cfg.ingress is not None and layout.ingress == "host":
            verify.check_tbf(host, verify.host_veth(host, req, prev), cfg.ingress, tick)
        if cfg.egress is not None and layout.egress == "host":
            veth = verify.host_veth(host, req, prev)
            ifb = kernel.get_link(host, name=name)
            if ifb is None:
                raise plugin_error("get ifb device: Link not found", name)
            verify.check_tbf(host, ifb, cfg.egress, tick)
            if not kernel.has_ingress_qdisc(host, veth.index):
                raise plugin_error(f"Failed to find ingress qdisc on {veth.name}")
            if ifb.index not in kernel.redirect_targets(host, veth.index):
                raise plugin_error(f"Failed to find filter redirecting {veth.name} to {name}")
    if (cfg.ingress is not None and layout.ingress == "pod") or (cfg.egress is not None and layout.egress == "pod"):
        with netlink.route_socket(req.netns) as pod:
            verify.check_pod(pod, req, cfg, layout, tick, name)
    return None


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
