"""route-override's configuration: the keys, their ``args.cni`` overrides, and route parsing.

Keys and override rules follow openshift/route-override-cni: ``flushroutes``, ``flushgateway``,
``delroutes``, ``addroutes`` and ``skipcheck`` in the plugin config, each replaced by the same key
under ``args.cni`` when present there.  Unlike the reference, ``args`` without ``cni`` is simply
ignored (the reference dereferences nil), a route without ``dst`` is refused, and an added route
whose ``dst`` has host bits or whose ``gw`` is of the other family is refused before the pod is
touched (the kernel would reject it halfway through ADD).
"""

from __future__ import annotations

import ipaddress

from cnichain.common import gojson
from cnichain.common.errors import CniError, plugin_error
from cnichain.common.record import FrozenRecord

TYPE_CHECKING = False
if TYPE_CHECKING:  # annotations only: typing and dataclasses cost ~10 ms per exec together
    from typing import Optional, Union

    Network = Union[ipaddress.IPv4Network, ipaddress.IPv6Network]
    Address = Union[ipaddress.IPv4Address, ipaddress.IPv6Address]

_LOAD = "failed to load netconf: "
DEFAULT_V4 = ipaddress.ip_network("0.0.0.0/0")
DEFAULT_V6 = ipaddress.ip_network("::/0")


class RouteSpec(FrozenRecord):
    """A route named in the config: destination network (canonical) and optional gateway."""

    dst: Network
    gw: Optional[Address] = None
    text: str = ""  # dst as written, for the result and messages

    @property
    def family(self) -> int:
        return self.dst.version

    def __str__(self) -> str:
        return f"{self.text or self.dst}" + (f" via {self.gw}" if self.gw is not None else "")


class RouteOverrideConfig(FrozenRecord):
    """The validated keys, ``args.cni`` overrides applied."""

    flushroutes: bool = False
    flushgateway: bool = False
    delroutes: tuple[RouteSpec, ...] = ()
    addroutes: tuple[RouteSpec, ...] = ()
    skipcheck: bool = False
    # Routes left out because no kernel would take them (no dst, host bits, mixed families): the
    # original passes them to netlink, prints the error and carries on, so the pod still starts.
    skipped: tuple[str, ...] = ()

    def all_delroutes(self) -> tuple[RouteSpec, ...]:
        """``delroutes`` plus both default routes when ``flushgateway`` is set."""
        extra: tuple[RouteSpec, ...] = ()
        if self.flushgateway:
            extra = (RouteSpec(DEFAULT_V4, text="0.0.0.0/0"), RouteSpec(DEFAULT_V6, text="::/0"))
        return self.delroutes + extra


# The reference's RouteOverrideConfig and its args.cni overrides, as Go decodes them.
ROUTE = gojson.Struct("types.Route", [
    ("dst", gojson.CIDR),
    gojson.Field("gw", gojson.IP, "GW"),
])
ARGS_CNI = gojson.Struct("main.IPAMArgs", [
    gojson.Field("flushroutes", gojson.Ptr(gojson.BOOL), "FlushRoutes"),
    gojson.Field("flushgateway", gojson.Ptr(gojson.BOOL), "FlushGateway"),
    gojson.Field("delroutes", gojson.List(gojson.Ptr(ROUTE)), "DelRoutes"),
    gojson.Field("addroutes", gojson.List(gojson.Ptr(ROUTE)), "AddRoutes"),
    gojson.Field("skipcheck", gojson.Ptr(gojson.BOOL), "SkipCheck"),
])
SCHEMA = gojson.Struct("main.RouteOverrideConfig", [
    gojson.Field("flushroutes", gojson.BOOL, "FlushRoutes"),
    gojson.Field("flushgateway", gojson.BOOL, "FlushGateway"),
    gojson.Field("delroutes", gojson.List(gojson.Ptr(ROUTE)), "DelRoutes"),
    gojson.Field("addroutes", gojson.List(gojson.Ptr(ROUTE)), "AddRoutes"),
    gojson.Field("skipcheck", gojson.BOOL, "SkipCheck"),
    ("args", gojson.Ptr(gojson.Struct("", [("cni", gojson.Ptr(ARGS_CNI))]))),
])


def _route(item: dict, *, adding: bool) -> RouteSpec:
    """One decoded route: ``dst`` required, ``gw`` of the same family, no host bits when adding."""
    iface = item["dst"]
    if iface is None:
        raise plugin_error(f'{_LOAD}route is missing "dst"')
    gw = item["gw"]
    if gw is not None and gw.version != iface.version:
        raise plugin_error(f"{_LOAD}route {iface}: gateway {gw} is not of the same IP family")
    if adding and iface.ip != iface.network.network_address:
        raise plugin_error(f"{_LOAD}route {iface}: destination has host bits set (did you mean {iface.network}?)")
    return RouteSpec(dst=iface.network, gw=gw, text=str(iface))


def _routes(items: Optional[list], *, adding: bool, skipped: list[str]) -> Optional[tuple[RouteSpec, ...]]:
    """The usable routes; each unusable one is named in ``skipped`` instead of failing the load."""
    if items is None:
        return None
    out = []
    for item in items:
        if item is None:
            continue
        try:
            out.append(_route(item, adding=adding))
        except CniError as exc:
            skipped.append(exc.msg[len(_LOAD):] if exc.msg.startswith(_LOAD) else exc.msg)
    return tuple(out)


def load(conf: dict) -> RouteOverrideConfig:
    d = gojson.decode(conf, SCHEMA, _LOAD)
    flushroutes: bool = d["flushroutes"]
    flushgateway: bool = d["flushgateway"]
    skipped: list[str] = []
    delroutes = _routes(d["delroutes"], adding=False, skipped=skipped) or ()
    addroutes = _routes(d["addroutes"], adding=True, skipped=skipped) or ()
    skipcheck: bool = d["skipcheck"]
    # Unlike the reference (a nil dereference), "args" without "cni" is simply nothing to apply.
    cni = d["args"]["cni"] if d["args"] is not None else None
    if cni is not None:
        over = gojson.overlay
        flushroutes = over(flushroutes, cni["flushroutes"])
        flushgateway = over(flushgateway, cni["flushgateway"])
        delroutes = over(delroutes, _routes(cni["delroutes"], adding=False, skipped=skipped))
        addroutes = over(addroutes, _routes(cni["addroutes"], adding=True, skipped=skipped))
        skipcheck = over(skipcheck, cni["skipcheck"])
    return RouteOverrideConfig(
        flushroutes=flushroutes,
        flushgateway=flushgateway,
        delroutes=delroutes,
        addroutes=addroutes,
        skipcheck=skipcheck,
        skipped=tuple(skipped),
    )
