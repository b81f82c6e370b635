"""bridge's netlink and sysctl side: the bridge, the veth pair, the pod's addresses and routes, the
gateway on the bridge, forwarding.  The nftables rules are :mod:`.firewall`'s.

The plugin process runs in the host (node) namespace, so "host" sockets and sysctls are plain; the
pod side uses a netlink session opened inside ``CNI_NETNS`` (common.netlink.LazySession) and, for
the pod's ``/proc/sys/net`` knobs, the calling thread entered into that namespace (common.netns).
The requests of the common path (links, the veth pair, port options, addresses, routes) are packed
by :mod:`.wire` and sent on the session's plain rtnetlink socket; VLAN filtering, the VLAN gateway,
DAD waits and forced address replacement go through pyroute2, which the session loads only then.
Functions raise CniError with the reference's messages; the caller owns ordering and rollback.
"""

from __future__ import annotations

import errno
import os
import time

from cnichain.common import netlink, netns, rtnl, sysctl
from cnichain.common.errors import plugin_error
from cnichain.common.kernel_errors import KernelError, errno_of, failures

from . import wire

TYPE_CHECKING = False
if TYPE_CHECKING:  # annotations only: typing costs milliseconds on every exec
    from typing import Any, Optional

    from cnichain.common.rtnl import Link

    from .config import BridgeConfig
    from .plan import L3Plan, PodRoute

IFF_PROMISC = 0x100
IFA_F_NODAD = 0x02
IFA_F_TENTATIVE = 0x40
IFA_F_DADFAILED = 0x08
VETH_NAME_TRIES = 10
_OPERSTATE_WAITS = (0.0, 0.05, 0.5, 1.0, 1.0)  # seconds, as the reference polls


def get_link(ipr: Any, name: str) -> Optional[Link]:
    return netlink.get_link(ipr, name=name)


def get_link_by_index(ipr: Any, index: int) -> Optional[Link]:
    return netlink.get_link(ipr, index=index)


# -- bridge ----------------------------------------------------------------------------------------

def ensure_bridge(ipr: Any, cfg: BridgeConfig) -> tuple[Link, bool]:
    """Create (or reuse) the bridge and bring it up; return (link, created_by_us).

    Every pod after the first finds the bridge, so it is looked up first and created only when
    missing (one request instead of a create that fails with EEXIST plus a lookup).  A concurrent
    ADD creating it in between is the same EEXIST case as before.
    """
    created = False
    link = get_link(ipr, cfg.bridge)
    if link is None:
        kwargs: dict[str, Any] = {"ifname": cfg.bridge, "kind": "bridge"}
        if cfg.mtu:
            kwargs["mtu"] = cfg.mtu
        if cfg.needs_vlan_filtering:
            kwargs["br_vlan_filtering"] = 1
        try:
            if cfg.needs_vlan_filtering:
                ipr.link("add", **kwargs)
            else:
                ipr.rtnl.request(rtnl.RTM_NEWLINK, rtnl.NLM_F_CREATE | rtnl.NLM_F_EXCL, wire.new_bridge(cfg.bridge, cfg.mtu))
            created = True
        except failures() as exc:
            if errno_of(exc) != errno.EEXIST:
                raise KernelError.of(exc, f'failed to create bridge "{cfg.bridge}": could not add "{cfg.bridge}"') from None
        link = get_link(ipr, cfg.bridge)
    if link is None:
        raise plugin_error(f'failed to create bridge "{cfg.bridge}": could not lookup "{cfg.bridge}": no such device')
    if link.kind != "bridge":
        raise plugin_error(f'failed to create bridge "{cfg.bridge}": "{cfg.bridge}" already exists but is not a bridge')
    index = link.index
    try:
        if cfg.promisc_mode and not link.flags & IFF_PROMISC:
            ipr.rtnl.request(rtnl.RTM_NEWLINK, 0, rtnl.link_change(index, flags=IFF_PROMISC, change=IFF_PROMISC))
        _ensure_accept_ra_off(cfg.bridge)
        if not link.up:
            ipr.rtnl.request(rtnl.RTM_NEWLINK, 0, rtnl.link_change(index, flags=rtnl.IFF_UP, change=rtnl.IFF_UP))
    except failures() as exc:
        if created:
            delete_link(ipr, index)
        raise KernelError.of(exc, f'failed to create bridge "{cfg.bridge}"') from None
    return link, created


def _ensure_accept_ra_off(ifname: str) -> None:
    """Host-side links never take router advertisements (the gateway is ours)."""
    try:
        sysctl.ensure(sysctl.path_for_interface("net/ipv6/conf/%s/accept_ra", ifname), "0")
    except FileNotFoundError:
        pass  # IPv6 disabled on this host


def delete_bridge_if_unused(ipr: Any, index: int) -> None:
    """Undo of a bridge this ADD created: removed only while no port is enslaved to it (a
    concurrent ADD may have attached its veth in the meantime)."""
    if not any(link.master == index for link in ipr.rtnl.links()):
        delete_link(ipr, index)


def delete_link(ipr: Any, index: int) -> None:
    try:
        ipr.rtnl.request(rtnl.RTM_DELLINK, 0, rtnl.link_change(index))
    except failures() as exc:
        if not netlink.is_gone(exc):
            raise


# -- veth pair -------------------------------------------------------------------------------------

def create_veth(host: Any, pod: Any, pod_fd: int, cfg: BridgeConfig, ifname: str,
                bridge_index: int) -> tuple[str, int, bool]:
    """Create the pair from the host with the container end born in the pod; (host name, index,
    whether a pair of ours was in the way and removed first).

    A container name that is taken fails the create with EEXIST, which is then told apart from a
    host name clash by one lookup in the pod: no lookup up front on the common path.  When what
    holds the name is a pair this plugin made (:func:`own_leftover`) -- an earlier ADD of this
    attachment whose process was killed before it finished or answered -- it is removed and the
    create tried again; anything else keeps the reference's error.
    """
    reclaimed = False
    for _ in range(VETH_NAME_TRIES):
        name = "veth" + os.urandom(4).hex()  # what secrets.token_hex does, without its imports
        try:
            host.rtnl.request(rtnl.RTM_NEWLINK, rtnl.NLM_F_CREATE | rtnl.NLM_F_EXCL,
                              wire.new_veth(name, ifname, pod_fd, cfg.mtu, cfg.mac))
        except failures() as exc:
            if errno_of(exc) == errno.EEXIST:
                taken = get_link(pod, ifname)
                if taken is not None:
                    leftover = None if reclaimed else own_leftover(host, taken, bridge_index)
                    if leftover is None:
                        raise plugin_error(
                            f'container veth name ("{ifname}") peer provided ("{name}") already exists'
                        ) from None
                    delete_link(host, leftover)  # takes the pod end with it
                    reclaimed = True
                continue  # host name clash (or our leftover gone): draw another one
            raise KernelError.of(exc, "failed to make veth pair") from None
        index = netlink.link_index(host, name)
        if index is None:
            raise plugin_error(f"failed to make veth pair: {name} vanished after creation")
        return name, index, reclaimed
    raise plugin_error("failed to make veth pair: no free host interface name after 10 tries")


def own_leftover(host: Any, pod_link: Link, bridge_index: int) -> Optional[int]:
    """The host index of the pair ``pod_link`` belongs to when this plugin made it, else None.

    Ours means: a veth whose peer is in the host namespace (the peer, looked up here by the pod
    end's IFLA_LINK, is a veth pointing back at the pod end's index), named as
    :func:`create_veth` names it, and enslaved to this network's bridge or to nothing yet (a
    create the killed process never got to attach).  A veth someone else put in the pod, or one
    whose peer stayed in the pod, fails these checks.
    """
    if pod_link.kind != "veth" or not pod_link.peer:
        return None
    peer = get_link_by_index(host, pod_link.peer)
    if peer is None or peer.kind != "veth" or peer.peer != pod_link.index:
        return None
    if not _our_veth_name(peer.name) or peer.master not in (0, bridge_index):
        return None
    return peer.index


def _our_veth_name(name: str) -> bool:
    """``veth`` and 8 lower-case hex digits: what :func:`create_veth` draws."""
    return len(name) == 12 and name.startswith("veth") and all(c in "0123456789abcdef" for c in name[4:])


def attach_host_end(ipr: Any, name: str, index: int, bridge_index: int, cfg: BridgeConfig) -> None:
    """Host end: no RAs, enslaved to the bridge, port flags and VLANs, up.

    Without VLANs, master and up go in one change request (the kernel enslaves before it applies
    the flags), with the port flags right after -- the reference even brings the end up before it
    enslaves it.  With VLANs the port comes up only after its VLANs are set, so it never passes a
    frame on the bridge's default VLAN.
    """
    up_now = not cfg.needs_vlan_filtering
    try:
        _ensure_accept_ra_off(name)
        ipr.rtnl.request(rtnl.RTM_NEWLINK, 0, wire.enslave(index, bridge_index, up_now))
    except failures() as exc:
        raise KernelError.of(exc, f'failed to connect "{name}" to bridge {cfg.bridge}') from None
    try:
        if cfg.hairpin_mode or cfg.port_isolation:
            ipr.rtnl.request(rtnl.RTM_NEWLINK, 0, wire.bridge_port(index, cfg.hairpin_mode, cfg.port_isolation))
    except failures() as exc:
        raise KernelError.of(exc, f"failed to setup hairpin mode for {name}") from None
    if up_now:
        return
    _set_port_vlans(ipr, name, index, cfg)
    try:
        ipr.rtnl.request(rtnl.RTM_NEWLINK, 0, rtnl.link_change(index, flags=rtnl.IFF_UP, change=rtnl.IFF_UP))
    except failures() as exc:
        raise KernelError.of(exc, f'failed to set "{name}" up') from None


def _set_port_vlans(ipr: Any, name: str, index: int, cfg: BridgeConfig) -> None:
    try:
        if not cfg.preserve_default_vlan:
            ipr.vlan_filter("del", index=index, vlan_info={"vid": 1})
        if cfg.vlan:
            ipr.vlan_filter("add", index=index, vlan_info={"vid": cfg.vlan, "flags": ["pvid", "untagged"]})
        elif cfg.vlan_trunk:
            ipr.vlan_filter("add", index=index, vlan_info={"vid": 1, "flags": ["pvid", "untagged"]})
        for vid in cfg.vlan_trunk:
            if vid != cfg.vlan:
                ipr.vlan_filter("add", index=index, vlan_info={"vid": vid})
    except failures() as exc:
        raise KernelError.of(exc, f'failed to setup vlan tag on interface "{name}"') from None


def wait_port_up(ipr: Any, index: int) -> Link:
    """The bridge port must reach operstate UP (bounded poll, as the reference); returns the link.

    The first look is immediate and is normally already UP, so no sleep is taken; the returned
    message also serves the result's host veth MAC (no second lookup).
    """
    state = "UNKNOWN"
    for delay in _OPERSTATE_WAITS:
        if delay:
            time.sleep(delay)
        link = get_link_by_index(ipr, index)
        if link is not None and link.operstate == "UP":
            return link
        state = link.operstate if link is not None else "DOWN"
    raise plugin_error(f"bridge port in error state: {state.lower()}")


# -- pod side --------------------------------------------------------------------------------------

def pod_sysctls(netns_path: str, ifname: str, cfg: BridgeConfig, plan: Optional[L3Plan]) -> None:
    """Per-interface knobs that need the thread inside the pod namespace."""
    with netns.entered(netns_path):
        v6conf = f"net/ipv6/conf/{ifname}"
        if os.path.isdir(os.path.join(sysctl.PROC_SYS, v6conf)):
            if cfg.enable_dad:
                sysctl.ensure(sysctl.path_for_interface("net/ipv6/conf/%s/accept_dad", ifname), "1")
                sysctl.ensure(sysctl.path_for_interface("net/ipv6/conf/%s/enhanced_dad", ifname), "1")
            else:
                sysctl.ensure(sysctl.path_for_interface("net/ipv6/conf/%s/accept_dad", ifname), "0")
        sysctl.ensure(sysctl.path_for_interface("net/ipv4/conf/%s/arp_notify", ifname), "1")
        if plan is not None and plan.has_ipv6:
            for name in ("lo", ifname):
                path = sysctl.path_for_interface("net/ipv6/conf/%s/disable_ipv6", name)
                try:
                    sysctl.ensure(path, "0")
                except OSError as exc:
                    raise plugin_error(
                        f'failed to enable IPv6 for interface "{name}" ({path}=0): {exc.strerror}'
                    ) from None
            sysctl.ensure(sysctl.path_for_interface("net/ipv6/conf/%s/keep_addr_on_down", ifname), "1")


def configure_pod(pod: Any, index: int, ifname: str, plan: L3Plan, cfg: BridgeConfig) -> None:
    """Addresses, link up, (DAD wait), routes: the reference's ConfigureIface."""
    from .plan import interface  # ipaddress: not needed by DEL, which imports this module too

    for ip in plan.ips:
        iface = interface(ip.address)
        flags = IFA_F_NODAD if iface.version == 6 and not cfg.enable_dad else 0
        try:
            pod.rtnl.request(wire.RTM_NEWADDR, rtnl.NLM_F_CREATE | rtnl.NLM_F_EXCL,
                             wire.new_address(index, str(iface.ip), iface.network.prefixlen, flags))
        except failures() as exc:
            raise KernelError.of(exc, f'failed to add IP addr {ip.address} to "{ifname}"') from None
    set_up(pod, index, ifname)
    if plan.has_ipv6_gateway and cfg.enable_dad:
        _wait_not_tentative(pod, index, ifname)
    for route in plan.pod_routes:
        add_route(pod, index, ifname, route)


def set_up(ipr: Any, index: int, ifname: str) -> None:
    try:
        ipr.rtnl.request(rtnl.RTM_NEWLINK, 0, rtnl.link_change(index, flags=rtnl.IFF_UP, change=rtnl.IFF_UP))
    except failures() as exc:
        raise KernelError.of(exc, f'failed to set "{ifname}" UP') from None


def _wait_not_tentative(pod: Any, index: int, ifname: str, timeout: float = 5.0) -> None:
    """The reference's ``ip.SettleAddresses`` (1.9.1): wait until no IPv6 address is tentative.

    An address that failed duplicate detection fails ADD at once (1.7.0 on); a timeout fails it
    only while the link is operationally up (1.9.0: a link that is down never finishes DAD).
    Only ever called with ``enabledad``: with DAD off nothing is tentative, so the wait would be
    one listing for nothing.
    """
    deadline = time.monotonic() + timeout
    while True:
        tentative = False
        for a in pod.get_addr(family=10, index=index):
            flags = a.get_attr("IFA_FLAGS") or a["flags"]
            if flags & IFA_F_DADFAILED:
                raise plugin_error(
                    f'failed to settle addresses for "{ifname}": '
                    f"link {ifname} has address {a.get_attr('IFA_ADDRESS')} in DADFAILED state"
                )
            tentative = tentative or bool(flags & IFA_F_TENTATIVE)
        if not tentative:
            return
        if time.monotonic() >= deadline:
            link = get_link_by_index(pod, index)
            if link is not None and link.operstate != "UP":
                return
            raise plugin_error(
                f'failed to settle addresses for "{ifname}": '
                f"link {ifname} still has tentative addresses after {int(timeout)} seconds"
            )
        time.sleep(0.05)


def add_route(pod: Any, index: int, ifname: str, route: PodRoute) -> None:
    kwargs: dict[str, Any] = {"dst": route.dst, "oif": index, "proto": 3}  # "boot", as ip(8) and netlink-go
    if route.gw:
        kwargs["gateway"] = route.gw
    if route.priority is not None:
        kwargs["priority"] = route.priority
    if route.table is not None:
        kwargs["table"] = route.table
    if route.scope is not None:
        kwargs["scope"] = route.scope
    elif not route.gw:
        kwargs["scope"] = 253  # link scope for a device route
    try:
        if route.table is not None and route.table > 255:
            pod.route("append", **kwargs)
        else:
            body = wire.new_route(route.dst, index, route.gw, route.priority, route.table, kwargs.get("scope", 0))
            pod.rtnl.request(wire.RTM_NEWROUTE, rtnl.NLM_F_CREATE | wire.NLM_F_APPEND, body)
    except failures() as exc:
        if errno_of(exc) == errno.EEXIST:
            return
        raise KernelError.of(
            exc,
            f"failed to add route '{route.dst} via {route.gw or '<nil>'} dev {ifname} "
            f"metric {route.priority or 0} (Scope: {route.scope or 0}, Table: {route.table or 0})'",
        ) from None


def delete_pod_link(netns_path: str, ifname: str) -> bool:
    """Delete the container interface; False when netns or link is already gone.

    One delete request by name (the kernel resolves it) on a plain rtnetlink socket in the pod
    (common.rtnl: DEL needs nothing else of netlink, so it never loads pyroute2): a missing link
    is ENODEV, not a lookup first.  Deleting a veth takes the kernel ~15-20 ms (RCU barriers)
    whatever we do.
    """
    from cnichain.common import rtnl

    if not os.path.exists(netns_path):
        return False  # pod namespace already gone: so is its veth
    try:
        with netlink.route_socket(netns_path) as pod:
            try:
                pod.request(rtnl.RTM_DELLINK, 0, rtnl.link_named(ifname))
            except failures() as exc:
                if netlink.is_gone(exc):
                    return False
                raise
            return True
    except netns.NetnsGone:
        return False


# -- gateway on the bridge -------------------------------------------------------------------------

def ensure_bridge_addrs(ipr: Any, bridge: Link, cfg: BridgeConfig, addrs: list[str]) -> str:
    """Put each "gw/prefix" on the bridge, or on the ``<bridge>.<vlan>`` gateway device (the
    reference's ensureAddr), then pin that device's MAC.

    Returns the pinned MAC ("" when there was nothing to do): it cannot change any more, so the
    caller reports it without reading the device again.
    """
    if not addrs:
        return ""
    from .plan import interface

    index = bridge.index
    dev = bridge.name or cfg.bridge
    for cidr in addrs:
        want = interface(cidr)
        family = 2 if want.version == 4 else 10
        listing = ipr.rtnl.dump(wire.RTM_GETADDR, wire.address_dump(family))
        present = [interface(f"{address}/{prefixlen}") for address, prefixlen in wire.addresses(listing, index)]
        if want in present:
            continue
        for have in present:
            overlaps = want.version == 4 or have.ip in want.network or want.ip in have.network
            if not overlaps:
                continue
            if not cfg.force_address:
                raise plugin_error(f'"{dev}" already has an IP address different from {cidr}')
            try:
                ipr.addr("del", index=index, address=str(have.ip), prefixlen=have.network.prefixlen)
            except failures() as exc:
                if not netlink.is_gone(exc):
                    raise KernelError.of(exc, f'could not remove IP address from "{dev}"') from None
        try:
            ipr.rtnl.request(wire.RTM_NEWADDR, rtnl.NLM_F_CREATE | rtnl.NLM_F_EXCL,
                             wire.new_address(index, str(want.ip), want.network.prefixlen,
                                              IFA_F_NODAD if want.version == 6 else 0))
        except failures() as exc:
            if errno_of(exc) != errno.EEXIST:
                raise KernelError.of(exc, f'could not add IP address {cidr} to "{dev}"') from None
    # Pin the MAC: otherwise the bridge takes the lowest port MAC and changes as ports churn.
    current = get_link_by_index(ipr, index)
    mac = current.mac if current is not None else ""
    if mac:
        try:
            ipr.rtnl.request(rtnl.RTM_NEWLINK, 0, rtnl.link_change(index, mac=mac))
        except failures() as exc:
            raise KernelError.of(exc, "could not set bridge's mac") from None
    return mac


def ensure_vlan_gateway(host: Any, bridge: Link, cfg: BridgeConfig) -> Link:
    """The reference's ensureVlanInterface: the ``<bridge>.<vlan>`` device that holds the gateway
    address when ``vlan`` and ``isGateway`` are both set, created once and shared by every pod of
    that VLAN (so DEL never removes it, as the reference does not).

    It is one end of a veth pair in the host; the other end is a bridge port with the VLAN as
    untagged PVID (VID 1 removed unless ``preserveDefaultVlan``), like a pod's port.
    """
    name = cfg.vlan_gateway
    link = get_link(host, name)
    if link is not None:
        return link
    fields = {f: getattr(cfg, f) for f in cfg._fields}
    port_cfg = type(cfg)(**{**fields, "vlan_trunk": (), "hairpin_mode": False, "port_isolation": False})
    for _ in range(VETH_NAME_TRIES):
        port = "veth" + os.urandom(4).hex()
        kwargs: dict[str, Any] = {"ifname": port, "kind": "veth", "peer": {"ifname": name}}
        mtu = bridge.mtu
        if mtu:
            kwargs["mtu"] = mtu
            kwargs["peer"]["mtu"] = mtu
        try:
            host.link("add", **kwargs)
        except failures() as exc:
            if errno_of(exc) == errno.EEXIST:
                existing = get_link(host, name)
                if existing is not None:
                    return existing  # a concurrent ADD made it first
                continue
            raise KernelError.of(exc, f'faild to create vlan gateway "{name}"') from None
        port_index = netlink.link_index(host, port)
        if port_index is None:
            raise plugin_error(f'faild to create vlan gateway "{name}": {port} vanished after creation')
        attach_host_end(host, port, port_index, bridge.index, port_cfg)
        link = get_link(host, name)
        if link is None:
            raise plugin_error(f'failed to lookup "{name}"')
        try:
            host.link("set", index=link.index, state="up")
        except failures() as exc:
            raise KernelError.of(exc, f'failed to up "{name}"') from None
        return get_link(host, name) or link
    raise plugin_error(f'faild to create vlan gateway "{name}": no free host interface name after 10 tries')


def enable_forwarding(families: tuple[int, ...]) -> None:
    if 4 in families:
        sysctl.ensure("/proc/sys/net/ipv4/ip_forward", "1")
    if 6 in families:
        sysctl.ensure("/proc/sys/net/ipv6/conf/all/forwarding", "1")
