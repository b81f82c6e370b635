"""Kernel side of route-override: list, delete and add main-table routes over netlink.

The caller opens the ``IPRoute`` with its thread in the pod namespace.  Unlike the reference,
which only printed kernel errors to stderr, every failure except "already gone" is raised.
"""

from __future__ import annotations

import errno
import ipaddress
import socket

from cnichain.common import netlink
from cnichain.common.errors import plugin_error
from cnichain.common.kernel_errors import KernelError, failures

from .config import RouteSpec
from .plan import KernelRoute, route_present

TYPE_CHECKING = False
if TYPE_CHECKING:  # annotations only
    from typing import Any, Optional

MAIN_TABLE = 254
RTN_UNICAST = 1
RTPROT_BOOT = 3  # what `ip route add` uses
SCOPE_UNIVERSE = 0


def list_routes(ipr: Any) -> list[KernelRoute]:
    """Unicast routes of the main table, both families."""
    out = []
    for family in (socket.AF_INET, socket.AF_INET6):
        for msg in ipr.get_routes(family=family, table=MAIN_TABLE):
            table = msg.get("table")
            if table != MAIN_TABLE or msg["type"] != RTN_UNICAST:
                continue
            dst_len = int(msg["dst_len"])
            dst = msg.get("dst") or ("0.0.0.0" if family == socket.AF_INET else "::")
            attrs = {
                "family": family,
                "dst": dst,
                "dst_len": dst_len,
                "table": MAIN_TABLE,
                "scope": int(msg["scope"]),
                "proto": int(msg["proto"]),
                "type": RTN_UNICAST,
                "tos": int(msg.get("tos") or 0),
            }
            oif, gw, prio = msg.get("oif"), msg.get("gateway"), msg.get("priority")
            if oif is not None:
                attrs["oif"] = oif
            if gw:
                attrs["gateway"] = gw
            if prio is not None:
                attrs["priority"] = prio
            out.append(
                KernelRoute(
                    dst=ipaddress.ip_network(f"{dst}/{dst_len}", strict=False),
                    gw=str(ipaddress.ip_address(gw)) if gw else None,
                    oif=oif,
                    scope=int(msg["scope"]),
                    attrs=attrs,
                )
            )
    return out


def interface_indexes(ipr: Any, names: list[str]) -> dict[str, int]:
    out = {}
    for name in names:
        idx = netlink.link_index(ipr, name)
        if idx is not None:
            out[name] = idx
    return out


def delete(ipr: Any, route: KernelRoute, ifname: str) -> None:
    try:
        ipr.route("del", **route.attrs)
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
        ipr.route("add", **attrs)
    except failures() as exc:
        if netlink.netlink_errno(exc) == errno.EEXIST and route_present(existing, spec, oif):
            return  # exactly this route is already there (a repeated ADD)
        raise KernelError.of(exc, f"failed to add route {spec} dev {ifname}", go=False) from None


def interface_or_error(indexes: dict[str, int], name: str) -> int:
    idx: Optional[int] = indexes.get(name)
    if idx is None:
        raise plugin_error(f'failed to add routes: interface "{name}" not found in the pod')
    return idx
