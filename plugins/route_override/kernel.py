"""Kernel side of route-override: list, delete and add main-table routes over netlink.

The caller opens the netlink socket (common.netlink.route_socket) with its thread in the pod
namespace; the requests are packed here with the attributes, in the order, that ``ip route`` and
pyroute2 send (tests/unit/test_route_override_wire.py holds pyroute2's bytes), so no pyroute2.  Unlike the reference,
which only printed kernel errors to stderr, every failure except "already gone" is raised.
"""

from __future__ import annotations

import errno
import ipaddress
import socket
import struct

from cnichain.common import netlink
from cnichain.common.rtnl import HEADER, NLM_F_CREATE, NLM_F_EXCL, U32, attrs, nla
from cnichain.common.errors import plugin_error
from cnichain.common.kernel_errors import KernelError, failures

from .config import RouteSpec
from .plan import KernelRoute, route_present

TYPE_CHECKING = False
if TYPE_CHECKING:  # annotations only
    from typing import Any, Optional

RTM_NEWROUTE, RTM_DELROUTE, RTM_GETROUTE = 24, 25, 26
RTA_DST, RTA_OIF, RTA_GATEWAY, RTA_PRIORITY, RTA_TABLE = 1, 4, 5, 6, 15
RTMSG = struct.Struct("=BBBBBBBBI")  # struct rtmsg: family, dst_len, src_len, tos, table, protocol, scope, type, flags
MAIN_TABLE = 254
RTN_UNICAST = 1
RTPROT_BOOT = 3  # what `ip route add` uses
SCOPE_UNIVERSE = 0


def list_routes(ipr: Any) -> list[KernelRoute]:
    """Unicast routes of the main table, both families (one listing each, picked by table here)."""
    out = []
    for family in (socket.AF_INET, socket.AF_INET6):
        request = RTMSG.pack(family, 0, 0, 0, MAIN_TABLE, 0, 0, 0, 0)
        for msg in ipr.rtnl.dump(RTM_GETROUTE, request):
            fam, dst_len, _src_len, tos, table, proto, scope, kind, _flags = RTMSG.unpack_from(msg, HEADER.size)
            found = dict(attrs(msg, HEADER.size + RTMSG.size))
            if RTA_TABLE in found:
                table = U32.unpack_from(found[RTA_TABLE])[0]
            if table != MAIN_TABLE or kind != RTN_UNICAST:
                continue
            dst = socket.inet_ntop(fam, found[RTA_DST]) if RTA_DST in found else (
                "0.0.0.0" if family == socket.AF_INET else "::")
            route = {"family": family, "dst": dst, "dst_len": dst_len, "table": MAIN_TABLE, "scope": scope,
                     "proto": proto, "type": RTN_UNICAST, "tos": tos}
            oif = U32.unpack_from(found[RTA_OIF])[0] if RTA_OIF in found else None
            gw = socket.inet_ntop(fam, found[RTA_GATEWAY]) if RTA_GATEWAY in found else None
            prio = U32.unpack_from(found[RTA_PRIORITY])[0] if RTA_PRIORITY in found else None
            if oif is not None:
                route["oif"] = oif
            if gw:
                route["gateway"] = gw
            if prio is not None:
                route["priority"] = prio
            out.append(
                KernelRoute(
                    dst=ipaddress.ip_network(f"{dst}/{dst_len}", strict=False),
                    gw=str(ipaddress.ip_address(gw)) if gw else None,
                    oif=oif,
                    scope=scope,
                    attrs=route,
                )
            )
    return out


def route_body(route: dict, *, deleting: bool) -> bytes:
    """The RTM_NEWROUTE / RTM_DELROUTE body for ``route`` (the keys :func:`list_routes` records),
    attributes in the order ``ip route`` and pyroute2 send them."""
    family = route["family"]
    body = RTMSG.pack(family, route["dst_len"], 0, route.get("tos", 0), MAIN_TABLE, route["proto"], route["scope"],
                      route["type"], 0)
    if route["dst_len"]:
        body += nla(RTA_DST, socket.inet_pton(family, route["dst"]))
    table = nla(RTA_TABLE, U32.pack(MAIN_TABLE))
    oif = nla(RTA_OIF, U32.pack(route["oif"])) if route.get("oif") is not None else b""
    body += table + oif if deleting else oif + table
    if route.get("gateway"):
        body += nla(RTA_GATEWAY, socket.inet_pton(family, route["gateway"]))
    if route.get("priority") is not None:
        body += nla(RTA_PRIORITY, U32.pack(route["priority"]))
    return body


def interface_indexes(ipr: Any, names: list[str]) -> dict[str, int]:
    out = {}
    for name in names:
        idx = netlink.link_index(ipr, name)
        if idx is not None:
            out[name] = idx
    return out


def delete(ipr: Any, route: KernelRoute, ifname: str) -> None:
    try:
        ipr.rtnl.request(RTM_DELROUTE, 0, route_body(route.attrs, deleting=True))
    except failures() as exc:
        if netlink.netlink_errno(exc) in (errno.ESRCH, errno.ENOENT, errno.ENODEV):
            return  # already gone
        raise KernelError.of(exc, f"failed to delete route {route.dst} dev {ifname}", go=False) from None


def add(ipr: Any, spec: RouteSpec, oif: int, ifname: str, existing: list[KernelRoute]) -> None:
    """``ip route add <dst> [via <gw>] dev <ifname>`` with scope universe, as the reference."""
    attrs: dict[str, Any] = {
        "family": socket.AF_INET if spec.family == 4 else socket.AF_INET6,
        "dst": str(spec.dst.network_address),
        "dst_len": spec.dst.prefixlen,
        "oif": oif,
        "table": MAIN_TABLE,
        "scope": SCOPE_UNIVERSE,
        "proto": RTPROT_BOOT,
        "type": RTN_UNICAST,
    }
    if spec.gw is not None:
        attrs["gateway"] = str(spec.gw)
    try:
        ipr.rtnl.request(RTM_NEWROUTE, NLM_F_CREATE | NLM_F_EXCL, route_body(attrs, deleting=False))
    except failures() as exc:
        if netlink.netlink_errno(exc) == errno.EEXIST and route_present(existing, spec, oif):
            return  # exactly this route is already there (a repeated ADD)
        raise KernelError.of(exc, f"failed to add route {spec} dev {ifname}", go=False) from None


def interface_or_error(indexes: dict[str, int], name: str) -> int:
    idx: Optional[int] = indexes.get(name)
    if idx is None:
        raise plugin_error(f'failed to add routes: interface "{name}" not found in the pod')
    return idx
