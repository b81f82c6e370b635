"""Pure planning of the layer-3 side of an attachment, from the IPAM result and the config.

No kernel access here: given what IPAM handed out, decide the result's ``ips``/``routes`` (gateway
defaults, the default route for ``isDefaultGateway``), the addresses the bridge must carry as the
pods' gateway, and the exact routes to install inside the pod.  Rules from section 6.2 step 7.
"""

from __future__ import annotations

import ipaddress

from cnichain.common.errors import plugin_error
from cnichain.common.record import FrozenRecord, Record
from cnichain.common.types import IPConfig, Result, Route

TYPE_CHECKING = False
if TYPE_CHECKING:  # annotations only: typing and dataclasses cost ~10 ms per exec together
    from typing import Optional, Union

    from .config import BridgeConfig

    IPNet = Union[ipaddress.IPv4Interface, ipaddress.IPv6Interface]
CONTAINER_INDEX = 2  # interfaces = [bridge, host veth, container]
DEFAULT_DST = {4: "0.0.0.0/0", 6: "::/0"}


class PodRoute(FrozenRecord):
    """One route as installed in the pod (gateway already resolved)."""

    dst: str
    gw: str = ""
    priority: Optional[int] = None
    table: Optional[int] = None
    scope: Optional[int] = None

    @property
    def family(self) -> int:
        return 6 if ":" in self.dst else 4


class L3Plan(Record):
    """What ADD does at layer 3, filled in by :func:`plan_l3`."""

    ips: list[IPConfig]
    routes: list[Route]
    bridge_addrs: list[str]  # "gw/prefix" to put on the bridge
    pod_routes: list[PodRoute]
    families: tuple[int, ...]

    def __init__(self) -> None:
        self.ips = []
        self.routes = []
        self.bridge_addrs = []
        self.pod_routes = []
        self.families = ()

    @property
    def has_ipv6(self) -> bool:
        return 6 in self.families

    @property
    def has_ipv6_gateway(self) -> bool:
        return any(ip.family == 6 and ip.gateway for ip in self.ips)


def interface(cidr: str) -> IPNet:
    try:
        return ipaddress.ip_interface(cidr)
    except ValueError:
        raise plugin_error(f"invalid CIDR address: {cidr}") from None


def gateway_for(cidr: str) -> str:
    """The reference's default gateway: the first address of the subnet."""
    net = interface(cidr).network
    return str(net.network_address + 1)


def plan_l3(ipam: Result, cfg: BridgeConfig) -> L3Plan:
    if not ipam.ips:
        raise plugin_error("IPAM plugin returned missing IP config")
    plan = L3Plan()
    first_gw: dict[int, str] = {}
    for ip in ipam.ips:
        iface = interface(ip.address)
        gw = ip.gateway
        if not gw and cfg.is_gateway:
            gw = gateway_for(ip.address)
        plan.ips.append(IPConfig(address=ip.address, gateway=gw, interface=CONTAINER_INDEX))
        if gw:
            first_gw.setdefault(iface.version, gw)
            if cfg.is_gateway:
                addr = f"{gw}/{iface.network.prefixlen}"
                if addr not in plan.bridge_addrs:
                    plan.bridge_addrs.append(addr)
    plan.families = tuple(sorted({interface(ip.address).version for ip in plan.ips}))
    plan.routes = list(ipam.routes)
    if cfg.is_default_gateway:
        for fam in (4, 6):
            default_gw = first_gw.get(fam)
            if not default_gw:
                continue
            found = any(_is_default(r.dst, fam) and r.gw for r in plan.routes)
            if not found:
                plan.routes.append(Route(dst=DEFAULT_DST[fam], gw=default_gw))
    for route in plan.routes:
        try:
            fam = ipaddress.ip_network(route.dst, strict=False).version
        except ValueError:
            raise plugin_error(f"invalid CIDR address: {route.dst}") from None
        gw = route.gw or first_gw.get(fam, "")
        plan.pod_routes.append(PodRoute(route.dst, gw, route.priority, route.table, route.scope))
    return plan


def _is_default(dst: str, fam: int) -> bool:
    try:
        net = ipaddress.ip_network(dst, strict=False)
    except ValueError:
        return False
    return net.version == fam and net.prefixlen == 0


def result_dns(cfg: BridgeConfig, ipam: Result):
    """Config ``dns`` wins when it says anything; otherwise IPAM's (reference v1.2.0+)."""
    return ipam.dns if cfg.dns.is_empty() else cfg.dns
