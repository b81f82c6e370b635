"""bridge CHECK: is the attachment described by prevResult still what ADD built?

Same checks and messages as the reference (section 6.5): bridge, container veth, its host peer on
the bridge, addresses and routes inside the pod.  Two differences: IPAM CHECK is delegated only when
an IPAM type is configured (the reference fails an L2-only network with "no plugin name provided"),
and with ``ipMasq`` the masquerade rules of every result address must be present too.
"""

from __future__ import annotations

import ipaddress

from cnichain.common import netns
from cnichain.common.errors import plugin_error
from cnichain.common.invoke import delegate_ipam
from cnichain.common.skel import Request
from cnichain.common.types import Result

from .kernel import IFF_PROMISC, get_link, get_link_by_index

TYPE_CHECKING = False
if TYPE_CHECKING:  # annotations only: typing costs milliseconds on every exec
    from typing import Any

    from .config import BridgeConfig


def check(req: Request, cfg: BridgeConfig) -> None:
    if cfg.is_layer3:
        delegate_ipam(req, "CHECK")
    prev = req.prev_result
    if prev is None:
        raise plugin_error("Required prevResult missing")
    from cnichain.common.netlink import session

    with session() as host, session(req.netns) as pod:
        bridge_index = _check_bridge(host, prev, cfg)
        container_index = _check_container(host, pod, prev, cfg, req, bridge_index)
        _check_addresses(pod, prev, container_index, req.ifname)
        _check_routes(pod, prev)
    if cfg.ip_masq and cfg.is_layer3:
        _check_masquerade(req, prev)


def _check_bridge(host: Any, prev: Result, cfg: BridgeConfig) -> int:
    entry = next((i for i in prev.interfaces if i.name == cfg.bridge and not i.sandbox), None)
    link = get_link(host, cfg.bridge)
    if link is None:
        raise plugin_error(f"CNI created bridge {cfg.bridge} in host namespace was not found")
    if link.kind != "bridge":
        raise plugin_error(f"Interface {cfg.bridge} does not have link type of bridge")
    if entry is not None and entry.mac and entry.mac.lower() != link.mac.lower():
        raise plugin_error(f"Bridge interface {cfg.bridge} Mac doesn't match: {entry.mac}")
    promisc = bool(link.flags & IFF_PROMISC)
    if promisc != cfg.promisc_mode:
        raise plugin_error(
            f"Bridge interface {cfg.bridge} configured Promisc Mode {str(cfg.promisc_mode).lower()} "
            f"doesn't match current state: {str(promisc).lower()} "
        )
    return link.index


def _check_container(host: Any, pod: Any, prev: Result, cfg: BridgeConfig, req: Request, bridge_index: int) -> int:
    entry = next((i for i in prev.interfaces if i.name == req.ifname and i.sandbox), None)
    if entry is None:
        if any(i.name == req.ifname for i in prev.interfaces):
            raise plugin_error(f"Interface {req.ifname} is expected to be in a sandbox")
        raise plugin_error(f"Interface name {req.ifname} not found")
    if entry.sandbox != req.netns and not netns.same_netns(entry.sandbox, req.netns):
        raise plugin_error(f"Sandbox in prevResult {entry.sandbox} doesn't match configured netns: {req.netns}")
    link = get_link(pod, req.ifname)
    if link is None:
        raise plugin_error(f"CNI created interface in container {req.ifname} not found")
    if link.kind != "veth":
        raise plugin_error(f"Error: Container interface {req.ifname} not of type veth")
    if entry.mac and entry.mac.lower() != link.mac.lower():
        raise plugin_error(f"Interface {req.ifname} Mac {entry.mac} doesn't match container Mac: {link.mac}")
    peer_index = link.peer
    peer = get_link_by_index(host, peer_index) if peer_index else None
    if (
        peer is None
        or peer.kind != "veth"
        or peer.master != bridge_index
        or peer.peer != link.index
    ):
        raise plugin_error(f"CNI veth created for bridge {cfg.bridge} was not found")
    named = [i for i in prev.interfaces if not i.sandbox and i.name not in (cfg.bridge,)]
    if named and peer.name not in {i.name for i in named}:
        raise plugin_error(f"CNI veth created for bridge {cfg.bridge} was not found")
    return link.index


def _check_addresses(pod: Any, prev: Result, index: int, ifname: str) -> None:
    present = set()
    for msg in pod.get_addr(index=index):
        present.add(ipaddress.ip_interface(f"{msg.get_attr('IFA_ADDRESS')}/{msg['prefixlen']}"))
    for ip in prev.ips:
        want = ipaddress.ip_interface(ip.address)
        if want not in present:
            raise plugin_error(f"Failed to match addr {ip.address} on interface {ifname}")


def _route_matches(msg: Any, net: Any, gw: str) -> bool:
    dst = msg.get_attr("RTA_DST")
    if msg["dst_len"] != net.prefixlen:
        return False
    if net.prefixlen and ipaddress.ip_address(dst) != net.network_address:
        return False
    if not gw:
        return True
    gateways = {msg.get_attr("RTA_GATEWAY")}
    for hop in msg.get_attr("RTA_MULTIPATH") or []:
        gateways.add(hop.get_attr("RTA_GATEWAY"))
    return any(g and ipaddress.ip_address(g) == ipaddress.ip_address(gw) for g in gateways)


def _check_routes(pod: Any, prev: Result) -> None:
    for route in prev.routes:
        net = ipaddress.ip_network(route.dst, strict=False)
        family = 2 if net.version == 4 else 10
        routes = pod.get_routes(family=family, table=route.table or 254)
        if not any(_route_matches(m, net, route.gw) for m in routes):
            via = f" via {route.gw}" if route.gw else ""
            raise plugin_error(f"Expected Route {route.dst}{via} not found in routing table")


def _check_masquerade(req: Request, prev: Result) -> None:
    from . import firewall

    have = firewall.masquerade_addresses(req.network_name, req.container_id, req.ifname) or []
    have_ips = {ipaddress.ip_address(a) for a in have}
    for ip in prev.ips:
        addr = ipaddress.ip_interface(ip.address).ip
        if addr not in have_ips:
            if not have and firewall.reference_masquerade_present(req.network_name, req.container_id, req.ifname):
                return  # a pod the reference set up before a swap in place: its rules do the job
            raise plugin_error(f"masquerade rule for {addr} ({req.container_id}/{req.ifname}) is missing")
