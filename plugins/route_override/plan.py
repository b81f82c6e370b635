"""Pure decisions of route-override: the new result, which kernel routes go, and what CHECK wants.

Kernel routes come in as :class:`KernelRoute` records (the routes module fills them from netlink),
so every rule here is testable without a namespace.
"""

from __future__ import annotations

import ipaddress

from cnichain.common.record import FrozenRecord
from cnichain.common.types import Result, Route

TYPE_CHECKING = False
if TYPE_CHECKING:  # annotations only
    from typing import Optional

    from .config import Network, RouteOverrideConfig, RouteSpec

SCOPE_LINK = 253
_LINK_LOCAL = (ipaddress.ip_network("169.254.0.0/16"), ipaddress.ip_network("fe80::/10"))


class KernelRoute(FrozenRecord):
    """One main-table unicast route as the kernel lists it."""

    dst: Network
    gw: Optional[str]
    oif: Optional[int]
    scope: int
    attrs: dict  # what deleting needs; not part of == or hash

    def __init__(
        self, dst: Network, gw: Optional[str] = None, oif: Optional[int] = None, scope: int = 0, attrs: Optional[dict] = None
    ) -> None:
        self._assign(dst=dst, gw=gw, oif=oif, scope=scope, attrs={} if attrs is None else attrs)

    def _values(self) -> tuple:
        return (self.dst, self.gw, self.oif, self.scope)

    def __str__(self) -> str:
        return f"{self.dst}" + (f" via {self.gw}" if self.gw else "") + (f" oif {self.oif}" if self.oif else "")


def canonical(dst: str) -> Optional[Network]:
    try:
        return ipaddress.ip_network(dst, strict=False)
    except ValueError:
        return None


def target_interfaces(result: Result, ifname: str) -> list[str]:
    """The pod-side interfaces: those of the result that have a sandbox, else ``CNI_IFNAME``."""
    names = [i.name for i in result.interfaces if i.sandbox and i.name]
    return list(dict.fromkeys(names)) or [ifname]


def new_result(prev: Result, cfg: RouteOverrideConfig) -> Result:
    """The result after overriding: routes and gateways as the pod will have them."""
    dels = {d.dst for d in cfg.all_delroutes()}
    if cfg.flushroutes:
        kept: list[Route] = []
    else:
        kept = [r for r in prev.routes if canonical(r.dst) not in dels]
    if cfg.flushgateway:
        for ip in prev.ips:
            # As the reference: the gateway becomes the unspecified address rather than vanishing,
            # which consumers (Multus) read as "no default gateway on this interface".
            ip.gateway = "::" if ip.family == 6 else "0.0.0.0"
    added = [Route(dst=a.text or str(a.dst), gw="" if a.gw is None else str(a.gw)) for a in cfg.addroutes]
    prev.routes = kept + added
    return prev


def is_link_local(net: Network) -> bool:
    """Whether ``net`` lies inside fe80::/10 or 169.254.0.0/16 (``subnet_of`` without its
    same-family precondition, which a type checker cannot follow through a union)."""
    return any(ll.version == net.version and net.network_address in ll and net.prefixlen >= ll.prefixlen
               for ll in _LINK_LOCAL)


def routes_to_delete(routes: list[KernelRoute], targets: set[int], cfg: RouteOverrideConfig) -> list[KernelRoute]:
    """Kernel routes on the pod interfaces that ``flushroutes``/``flushgateway``/``delroutes`` remove.

    ``flushroutes`` keeps what the reference keeps: link-scope routes (the subnet routes the kernel
    made for the addresses), link-local destinations and gateway-less non-default routes (IPv6
    prefix routes).  ``delroutes`` match on the destination only, whatever the gateway, and apply
    even when the previous result never listed the route.
    """
    dels = {d.dst for d in cfg.all_delroutes()}
    out = []
    for r in routes:
        if r.oif not in targets:
            continue
        if r.dst in dels:
            out.append(r)
        elif cfg.flushroutes and r.scope != SCOPE_LINK:
            if r.dst.prefixlen == 0 or (r.gw and not is_link_local(r.dst)):
                out.append(r)
    return out


def route_present(routes: list[KernelRoute], spec: RouteSpec, oif: Optional[int]) -> bool:
    """An added route already exists exactly (same destination, gateway and device)."""
    gw = None if spec.gw is None else str(spec.gw)
    return any(r.dst == spec.dst and r.gw == gw and (oif is None or r.oif == oif) for r in routes)


def check_problems(routes: list[KernelRoute], targets: set[int], result: Result, cfg: RouteOverrideConfig) -> list[str]:
    """What CHECK finds wrong: result routes missing from the pod, deleted routes still there."""
    problems = []
    for r in result.routes:
        dst = canonical(r.dst)
        found = [k for k in routes if k.dst == dst]
        if not found:
            problems.append(f"route-override: route {r.dst} is missing from the pod")
            continue
        if r.gw and not any(k.gw and ipaddress.ip_address(k.gw) == ipaddress.ip_address(r.gw) for k in found):
            have = ", ".join(k.gw or "no gateway" for k in found)
            problems.append(f"route-override: failed to match route: {r.dst} via {r.gw}, the pod has via {have}")
    wanted = {canonical(r.dst) for r in result.routes}
    for d in cfg.all_delroutes():
        if d.dst in wanted:
            continue  # deleted, then added back by addroutes (the README's own example)
        left = [k for k in routes if k.dst == d.dst and k.oif in targets]
        if left:
            problems.append(f"route-override: route is not removed: {left[0]}")
    return problems
