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
from cnichain.common.errors import plugin_error
from cnichain.common.record import FrozenRecord

TYPE_CHECKING = False
if TYPE_CHECKING:  # annotations only: typing and dataclasses cost ~10 ms per exec together
    from typing import Any, Optional, Union

    Network = Union[ipaddress.IPv4Network, ipaddress.IPv6Network]
    Address = Union[ipaddress.IPv4Address, ipaddress.IPv6Address]

_LOAD = "failed to load netconf: "
DEFAULT_V4 = ipaddress.ip_network("0.0.0.0/0")
DEFAULT_V6 = ipaddress.ip_network("::/0")


class RouteSpec(FrozenRecord):
    """A route named in the config: destination network (canonical) and optional gateway."""

    __slots__ = _fields = ("dst", "gw", "text")
    dst: Network
    gw: Optional[Address]
    text: str  # dst as written, for the result and messages

    def __init__(self, dst: Network, gw: Optional[Address] = None, text: str = "") -> None:
        self._assign(dst, gw, text)

    @property
    def family(self) -> int:
        return self.dst.version

    def __str__(self) -> str:
        return f"{self.text or self.dst}" + (f" via {self.gw}" if self.gw is not None else "")


class RouteOverrideConfig(FrozenRecord):
    """The validated keys, ``args.cni`` overrides applied."""

    __slots__ = _fields = ("flushroutes", "flushgateway", "delroutes", "addroutes", "skipcheck")
    flushroutes: bool
    flushgateway: bool
    delroutes: tuple[RouteSpec, ...]
    addroutes: tuple[RouteSpec, ...]
    skipcheck: bool

    def __init__(
        self,
        flushroutes: bool = False,
        flushgateway: bool = False,
        delroutes: tuple[RouteSpec, ...] = (),
        addroutes: tuple[RouteSpec, ...] = (),
        skipcheck: bool = False,
    ) -> None:
        self._assign(flushroutes, flushgateway, delroutes, addroutes, skipcheck)

    def all_delroutes(self) -> tuple[RouteSpec, ...]:
        """``delroutes`` plus both default routes when ``flushgateway`` is set."""
        extra: tuple[RouteSpec, ...] = ()
        if self.flushgateway:
            extra = (RouteSpec(DEFAULT_V4, text="0.0.0.0/0"), RouteSpec(DEFAULT_V6, text="::/0"))
        return self.delroutes + extra


def parse_cidr(text: str) -> tuple[ipaddress.IPv4Interface | ipaddress.IPv6Interface, bool]:
    """CIDR text -> (interface, host bits set); ``invalid CIDR address: X`` as libcni words it."""
    if not isinstance(text, str) or text.count("/") != 1 or "%" in text:
        raise plugin_error(f"{_LOAD}invalid CIDR address: {text}")
    addr, _, prefix = text.partition("/")
    if not prefix.isdigit() or not prefix.isascii():
        raise plugin_error(f"{_LOAD}invalid CIDR address: {text}")
    try:
        iface = ipaddress.ip_interface(f"{addr}/{int(prefix)}")
    except ValueError:
        raise plugin_error(f"{_LOAD}invalid CIDR address: {text}") from None
    return iface, iface.ip != iface.network.network_address


def _route(item: Any, where: str, *, adding: bool) -> RouteSpec:
    gojson.want_object(item, where, "types.Route", _LOAD)
    dst_text = gojson.want_str(gojson.get(item, "dst"), f"{where}.dst", "types.IPNet", _LOAD)
    if not dst_text:
        raise plugin_error(f'{_LOAD}route is missing "dst"')
    iface, host_bits = parse_cidr(dst_text)
    gw_text = gojson.want_str(gojson.get(item, "gw"), f"{where}.gw", "net.IP", _LOAD)
    gw: Optional[Address] = None
    if gw_text:
        try:
            gw = ipaddress.ip_address(gw_text)
        except ValueError:
            raise plugin_error(f"{_LOAD}invalid IP address: {gw_text}") from None
        if gw.version != iface.version:
            raise plugin_error(f"{_LOAD}route {dst_text}: gateway {gw_text} is not of the same IP family")
    if adding and host_bits:
        raise plugin_error(
            f"{_LOAD}route {dst_text}: destination has host bits set (did you mean {iface.network}?)"
        )
    return RouteSpec(dst=iface.network, gw=gw, text=dst_text)


def _routes(value: Any, where: str, *, adding: bool) -> Optional[tuple[RouteSpec, ...]]:
    items = gojson.want_list(value, where, "[]*types.Route", _LOAD)
    if items is None:
        return None
    return tuple(_route(item, where, adding=adding) for item in items if item is not None)


def load(conf: dict) -> RouteOverrideConfig:
    g = gojson.get
    where = "RouteOverrideConfig"
    flushroutes = bool(gojson.want_bool(g(conf, "flushroutes"), f"{where}.flushroutes", _LOAD))
    flushgateway = bool(gojson.want_bool(g(conf, "flushgateway"), f"{where}.flushgateway", _LOAD))
    delroutes = _routes(g(conf, "delroutes"), f"{where}.delroutes", adding=False) or ()
    addroutes = _routes(g(conf, "addroutes"), f"{where}.addroutes", adding=True) or ()
    skipcheck = bool(gojson.want_bool(g(conf, "skipcheck"), f"{where}.skipcheck", _LOAD))

    args = gojson.want_object(g(conf, "args"), f"{where}.args", "struct", _LOAD)
    cni = gojson.want_object(g(args, "cni"), f"{where}.args.cni", "main.IPAMArgs", _LOAD)
    if cni:
        where = "IPAMArgs.args.cni"
        over = gojson.overlay
        flushroutes = over(flushroutes, gojson.want_bool(g(cni, "flushroutes"), f"{where}.flushroutes", _LOAD))
        flushgateway = over(flushgateway, gojson.want_bool(g(cni, "flushgateway"), f"{where}.flushgateway", _LOAD))
        delroutes = over(delroutes, _routes(g(cni, "delroutes"), f"{where}.delroutes", adding=False))
        addroutes = over(addroutes, _routes(g(cni, "addroutes"), f"{where}.addroutes", adding=True))
        skipcheck = over(skipcheck, gojson.want_bool(g(cni, "skipcheck"), f"{where}.skipcheck", _LOAD))
    return RouteOverrideConfig(
        flushroutes=flushroutes,
        flushgateway=flushgateway,
        delroutes=delroutes,
        addroutes=addroutes,
        skipcheck=skipcheck,
    )
