"""bridge: the command handlers.

ADD builds the attachment step by step and registers an undo action after every step that changed
something, so any failure (IPAM exhausted, name clash, netlink error, a killed nft transaction)
unwinds in reverse: no veth, no IPAM reservation, no firewall rule and no freshly created, still
empty bridge are left behind.  DEL needs only the config, container ID and ifname: firewall rules
are found by their owner tag, so they go even when ``CNI_NETNS`` is empty or already deleted
(unlike the reference, upstream issue #810).
"""

from __future__ import annotations

import os

from cnichain.common import netns
from cnichain.common.errors import DUPLICATE_ALLOCATION, CniError
from cnichain.common.invoke import delegate_ipam
from cnichain.common.log import log
from cnichain.common.rollback import Rollback
from cnichain.common.skel import Plugin, Request
from cnichain.common.types import Interface, Result

from .config import add_refusals, load

TYPE_CHECKING = False
if TYPE_CHECKING:  # annotations only: typing costs milliseconds on every exec
    from typing import Any, Optional

    from .config import BridgeConfig


def _config(req: Request, *, with_mac: bool = True) -> BridgeConfig:
    return load(req.conf, req.args, with_mac=with_mac)


def cmd_add(req: Request) -> Result:
    cfg = _config(req)
    add_refusals(cfg)
    pod_fd = netns.open_netns(req.netns)  # a missing netns fails before anything is created
    host = pod = None
    try:
        from cnichain.common.netlink import LazySession

        with Rollback() as undo:  # unwound before the sockets its undos use are closed
            host = LazySession()  # pyroute2 only for the rarer paths (VLANs, DAD waits, ...)
            pod = LazySession(req.netns)
            return _add(req, cfg, host, pod, pod_fd, undo)
    finally:
        for sock in (host, pod):
            if sock is not None:
                sock.close()
        os.close(pod_fd)


def _add(req: Request, cfg: BridgeConfig, host: Any, pod: Any, pod_fd: int, undo: Rollback) -> Result:
    from . import firewall, kernel
    from .plan import plan_l3, result_dns

    bridge, created = kernel.ensure_bridge(host, cfg)
    bridge_index = bridge.index
    if created:
        undo.push("remove new bridge", kernel.delete_bridge_if_unused, host, bridge_index)
    veth_name, veth_index, reclaimed = kernel.create_veth(host, pod, pod_fd, cfg, req.ifname, bridge_index)
    if reclaimed:
        # An earlier ADD of this attachment was killed half way (its veth pair was in the way):
        # release what else it may have taken before making it again, as its DEL would.
        _release_leftovers(req, cfg)
    undo.push("delete veth", kernel.delete_link, host, veth_index)
    kernel.attach_host_end(host, veth_name, veth_index, bridge_index, cfg)

    container = kernel.get_link(pod, req.ifname)
    if container is None:
        from cnichain.common.errors import plugin_error

        raise plugin_error(f"failed to find container interface {req.ifname} after creating it")
    container_index = container.index
    container_mac = container.mac

    if cfg.macspoofchk:
        undo.push("remove spoof check", firewall.remove_spoof_check, cfg.network, req.container_id, req.ifname)
        firewall.add_spoof_check(cfg.network, req.container_id, req.ifname, veth_name, container_mac)

    result = Result(cni_version=req.cni_version)
    bridge_mac = ""  # known without a lookup once the gateway step pinned it
    vlan_interface = None  # the <bridge>.<vlan> gateway device, reported after the pod's (as the reference)
    if cfg.is_layer3:
        # The release is registered first: an IPAM ADD killed after it reserved, or one that
        # fails after writing, leaves nothing either (its DEL is idempotent).
        undo.push("release IPAM", delegate_ipam, req, "DEL")
        ipam = _ipam_add(req)
        assert ipam is not None
        plan = plan_l3(ipam, cfg)
        kernel.pod_sysctls(req.netns, req.ifname, cfg, plan)
        kernel.configure_pod(pod, container_index, req.ifname, plan, cfg)
        if cfg.is_gateway and cfg.vlan_gateway:
            vlan_dev = kernel.ensure_vlan_gateway(host, bridge, cfg)
            vlan_mac = kernel.ensure_bridge_addrs(host, vlan_dev, cfg, plan.bridge_addrs)
            vlan_interface = Interface(name=cfg.vlan_gateway, mac=vlan_mac or vlan_dev.mac)
            kernel.enable_forwarding(plan.families)
        elif cfg.is_gateway:
            bridge_mac = kernel.ensure_bridge_addrs(host, bridge, cfg, plan.bridge_addrs)
            kernel.enable_forwarding(plan.families)
        if cfg.ip_masq:
            masqueraded = [ip.address for ip in plan.ips]
            undo.push("remove masquerade", firewall.remove_masquerade, cfg.network, req.container_id, req.ifname,
                      masqueraded)
            firewall.add_masquerade(cfg.network, req.container_id, req.ifname, masqueraded)
        result.ips, result.routes, result.dns = plan.ips, plan.routes, result_dns(cfg, ipam)
    elif not cfg.disable_container_interface:
        kernel.set_up(pod, container_index, req.ifname)
    if not cfg.is_layer3 and not cfg.dns.is_empty():
        result.dns = cfg.dns

    veth_now = None
    if not cfg.disable_container_interface:
        veth_now = kernel.wait_port_up(host, veth_index)
    if not bridge_mac:
        # Attaching a port can change an unpinned bridge's MAC: report the current one.
        bridge_mac = (kernel.get_link_by_index(host, bridge_index) or bridge).mac
    if veth_now is None:
        veth_now = kernel.get_link_by_index(host, veth_index)
    result.interfaces = [
        Interface(name=cfg.bridge, mac=bridge_mac),
        Interface(name=veth_name, mac=veth_now.mac if veth_now is not None else ""),
        Interface(name=req.ifname, mac=container_mac, sandbox=req.netns),
    ]
    if vlan_interface is not None:
        result.interfaces.append(vlan_interface)
    return result


IPAM_REDOS = 3  # releases and asks again at most this often: one per killed ADD still in flight


def _ipam_add(req: Request) -> Optional[Result]:
    """The IPAM delegate's ADD; when it says this attachment holds an address already -- its own
    ADD was killed after reserving, and the shim ran it again -- released and asked once more.
    Nobody was told that address: the ADD that took it never answered.  A killed ADD's delegate
    can still be running and reserve between this release and the next ask (the agent's worker
    serving it was not the one killed), so the release is repeated, a bounded number of times."""
    for _redo in range(IPAM_REDOS):
        try:
            return delegate_ipam(req, "ADD")
        except CniError as exc:
            if DUPLICATE_ALLOCATION not in exc.msg:
                raise
        log.info("IPAM holds an address of an ADD of this attachment that never finished: released, asking again")
        delegate_ipam(req, "DEL")
    return delegate_ipam(req, "ADD")


def _release_leftovers(req: Request, cfg: BridgeConfig) -> None:
    """What a killed ADD of this attachment may hold besides its veth pair: its firewall rules
    (found by owner tag) and its IPAM reservation."""
    if cfg.ip_masq or cfg.macspoofchk:
        from . import firewall

        if cfg.ip_masq:
            firewall.remove_masquerade(cfg.network, req.container_id, req.ifname)
        if cfg.macspoofchk:
            firewall.remove_spoof_check(cfg.network, req.container_id, req.ifname)
    if cfg.is_layer3:
        delegate_ipam(req, "DEL")


def _prev_addresses(req: Request) -> list[str]:
    """The addresses of the cached result this DEL carries ([] without one, or one that does not parse)."""
    try:
        prev = req.prev_result
    except CniError:
        return []
    return [ip.address for ip in prev.ips] if prev is not None else []


def cmd_del(req: Request) -> None:
    """Best effort from whatever parses: with a config that does not decode, every rule kind is
    looked up by its tag (removal is idempotent) and IPAM is still asked to release."""
    try:
        cfg = _config(req, with_mac=False)
        masq, spoof, layer3 = cfg.ip_masq, cfg.macspoofchk, cfg.is_layer3
    except CniError as exc:
        log.skipped("DEL", [f"the bridge keys ({exc.msg}); removing every rule kind by tag"])
        masq = spoof = True
        try:
            layer3 = bool(req.ipam_type)
        except CniError:
            layer3 = False
    from . import firewall, kernel  # no pyroute2 or nftables binding until a call needs one

    if masq:
        # The cached result's addresses make it one transaction; without them, a listing.
        firewall.remove_masquerade(req.network_name, req.container_id, req.ifname, _prev_addresses(req))
    if spoof:
        firewall.remove_spoof_check(req.network_name, req.container_id, req.ifname)
    if masq or spoof:
        firewall.remove_reference_rules(req.network_name, req.container_id, req.ifname, masq=masq, spoof=spoof)
    if req.netns:
        kernel.delete_pod_link(req.netns, req.ifname)
    if layer3:
        delegate_ipam(req, "DEL")
    return None


def cmd_check(req: Request) -> None:
    from .check import check

    check(req, _config(req))
    return None


def cmd_status(req: Request) -> None:
    """Node health only (containerd 2.1+ asks every ~5 s; a failure evicts the node's pods).

    Reads just ``ipam.type``, ``ipMasq`` and ``macspoofchk``, leniently: a missing IPAM plugin
    or unusable nftables (when the config needs it) fail with code 50; otherwise the IPAM plugin's
    own STATUS answers, as the spec asks.  No other key of the config can fail STATUS.
    """
    from cnichain.common.health import not_available, require_delegate

    from .config import status_needs

    ipam_type, masq, spoof = status_needs(req.conf)
    if ipam_type:
        require_delegate("bridge", ipam_type, req.path)
    if masq or spoof:
        from . import firewall

        reason = firewall.nft_unusable(masq=masq, spoof=spoof)
        if reason is not None:
            wanted = " and ".join(k for k, on in (("ipMasq", masq), ("macspoofchk", spoof)) if on)
            raise not_available("bridge", f"nftables is unusable for {wanted}: {reason}",
                                "load the nf_tables kernel modules and install libnftables with its Python binding")
    if ipam_type:
        delegate_ipam(req, "STATUS")
    return None


def cmd_gc(req: Request) -> None:
    """CNI 1.1 GC (the reference has none): drop rules of attachments the runtime no longer has."""
    cfg = _config(req, with_mac=False)
    if cfg.ip_masq or cfg.macspoofchk:
        from . import firewall, rules

        keep = {rules.owner_tag(cfg.network, cid, ifname) for cid, ifname in req.valid_attachments()}
        firewall.gc(cfg.network, keep)
    if cfg.is_layer3:
        delegate_ipam(req, "GC")
    return None


PLUGIN = Plugin(
    name="bridge",
    add=cmd_add,
    delete=cmd_del,
    check=cmd_check,
    gc=cmd_gc,
    status=cmd_status,
    about="CNI bridge plugin (cnichain)",
)

