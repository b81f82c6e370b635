"""host-local's IPAM configuration: parsing and validation, with the reference's error texts.

The reference decodes the whole network config with Go's ``encoding/json`` into
``allocator.Net`` and then canonicalises every range.  Runtimes and operators match on its error
strings, so this module reproduces them word for word (``invalid range set 0: Network has host
bits set...``).  The decoding itself is :mod:`cnichain.common.gojson` driven by :data:`SCHEMA`, a
copy of the reference's structs: keys match case-insensitively (containerd's go-cni sends
``ipRanges`` as ``[[{"Subnet": ..., "RangeStart": ""}]]``), ``""`` leaves a ``net.IP`` unset,
``null`` leaves a field at its zero value, and a wrong JSON type fails with Go's text.

Everything here is pure: no files are read (``resolvConf`` is read by the plugin at ADD time).
The records are :mod:`cnichain.common.record` classes rather than dataclasses, and ``typing`` is
imported for annotations only: host-local runs once per pod ADD and DEL, and those two imports
were about a third of its exec time (see benchmarks/README.md).
"""

from __future__ import annotations

import ipaddress

from cnichain.common import gojson
from cnichain.common.goip import canonical, parse_ip_or_cidr
from cnichain.common.cniargs import parse_cni_args
from cnichain.common.errors import CniError, plugin_error
from cnichain.common.record import FrozenRecord
from cnichain.common.types import ROUTE, Route
from cnichain.common.version import parse as parse_version

TYPE_CHECKING = False
if TYPE_CHECKING:  # annotations only
    from typing import Any, Iterable, Optional, Union

    IP = Union[ipaddress.IPv4Address, ipaddress.IPv6Address]
    Network = Union[ipaddress.IPv4Network, ipaddress.IPv6Network]

DEFAULT_DATA_DIR = "/var/lib/cni/networks"


# -- typed configuration ---------------------------------------------------------------------


class Range(FrozenRecord):
    """One canonical range: every field filled in, start/end inclusive, gateway never handed out."""

    __slots__ = _fields = ("subnet", "gateway", "start", "end")
    subnet: Network
    gateway: IP
    start: IP
    end: IP

    def __init__(self, subnet: Network, gateway: IP, start: IP, end: IP) -> None:
        self._assign(subnet=subnet, gateway=gateway, start=start, end=end)

    @property
    def family(self) -> int:
        return self.subnet.version

    def contains(self, ip: IP) -> bool:
        """Go's ``Range.Contains``: same family, inside the subnet and within [start, end]."""
        ip = canonical(ip)
        if ip.version != self.subnet.version or ip not in self.subnet:
            return False
        return int(self.start) <= int(ip) <= int(self.end)

    def overlaps(self, other: "Range") -> bool:
        if self.family != other.family:
            return False
        return (
            self.contains(other.start)
            or self.contains(other.end)
            or other.contains(self.start)
            or other.contains(self.end)
        )

    def __str__(self) -> str:
        return f"{self.start}-{self.end}"


class RangeSet(FrozenRecord):
    """A pool of disjoint same-family ranges; one address is allocated per range set."""

    __slots__ = _fields = ("ranges",)
    ranges: tuple[Range, ...]

    def __init__(self, ranges: tuple[Range, ...]) -> None:
        self._assign(ranges=ranges)

    @property
    def family(self) -> int:
        return self.ranges[0].family

    def range_for(self, ip: IP) -> Optional[Range]:
        for r in self.ranges:
            if r.contains(ip):
                return r
        return None

    def contains(self, ip: IP) -> bool:
        return self.range_for(ip) is not None

    def overlaps(self, other: "RangeSet") -> bool:
        return any(a.overlaps(b) for a in self.ranges for b in other.ranges)

    def __str__(self) -> str:
        return ",".join(str(r) for r in self.ranges)


class IpamConfig(FrozenRecord):
    """What host-local needs from one invocation's network config."""

    __slots__ = _fields = ("name", "cni_version", "ranges", "routes", "data_dir", "resolv_conf", "requested_ips")
    name: str
    cni_version: str
    ranges: tuple[RangeSet, ...]
    routes: tuple[Route, ...]
    data_dir: str
    resolv_conf: str
    requested_ips: tuple[IP, ...]

    def __init__(
        self,
        name: str,
        cni_version: str,
        ranges: tuple[RangeSet, ...],
        routes: tuple[Route, ...] = (),
        data_dir: str = DEFAULT_DATA_DIR,
        resolv_conf: str = "",
        requested_ips: tuple[IP, ...] = (),
    ) -> None:
        self._assign(
            name=name,
            cni_version=cni_version,
            ranges=ranges,
            routes=routes,
            data_dir=data_dir,
            resolv_conf=resolv_conf,
            requested_ips=requested_ips,
        )


# -- the reference's structs, as Go decodes them ---------------------------------------------


class _PkgIP(gojson.GoType):
    """The plugins repo's ``ip.IP`` (requested addresses): ``10.1.2.3`` or ``10.1.2.3/24``.

    Its ``UnmarshalText`` fails as ``invalid IP address X`` (no colon, unlike ``net.IP``) and turns
    an empty string into an empty IP, which ``LoadIPAMConfig`` later rejects as ``cannot understand
    ip: IP <nil> not v4 nor v6``; that empty IP decodes to ``""`` here.
    """

    __slots__ = ()
    nilable = True
    text = True

    def decode(self, value: Any, ctx: Any, current: Any = None) -> Any:
        if not isinstance(value, str):
            return self.skip(value, ctx, current)
        if value == "":
            return ""
        ip = parse_ip_or_cidr(value)
        if ip is None:
            raise ctx.text_error(f"invalid IP address {value}")
        return ip


PKG_IP = _PkgIP("ip.IP")
IPS = gojson.List(gojson.Ptr(PKG_IP))  # []*ip.IP

# allocator.Range; containerd's go-cni sends it as {"Subnet": ..., "RangeStart": "", ...}.
_RANGE_FIELDS = [
    gojson.Field("rangeStart", gojson.IP, "RangeStart"),
    gojson.Field("rangeEnd", gojson.IP, "RangeEnd"),
    gojson.Field("subnet", gojson.CIDR, "Subnet"),
    gojson.Field("gateway", gojson.IP, "Gateway"),
]
RANGE = gojson.Struct("allocator.Range", _RANGE_FIELDS)
RANGE_SETS = gojson.List(gojson.List(RANGE, "allocator.RangeSet"), "[]allocator.RangeSet")
IPAM_ARGS = gojson.Struct("allocator.IPAMArgs", [gojson.Field("ips", IPS, "IPs")])
# IPAMConfig embeds *Range, whose fields are promoted: the legacy single range at the top of "ipam".
IPAM_CONFIG = gojson.Struct("allocator.IPAMConfig", [
    *_RANGE_FIELDS,
    gojson.Field("Name", gojson.STRING, "Name"),  # no json tag; overwritten by the network's name
    ("type", gojson.STRING),
    ("routes", gojson.List(gojson.Ptr(ROUTE))),
    ("dataDir", gojson.STRING),
    ("resolvConf", gojson.STRING),
    ("ranges", RANGE_SETS),
])
SCHEMA = gojson.Struct("allocator.Net", [
    ("name", gojson.STRING),
    gojson.Field("cniVersion", gojson.STRING, "CNIVersion"),
    gojson.Field("ipam", gojson.Ptr(IPAM_CONFIG), "IPAM"),
    gojson.Field("runtimeConfig", gojson.Struct(
        'struct { IPRanges []allocator.RangeSet "json:\\"ipRanges,omitempty\\""; '
        'IPs []*ip.IP "json:\\"ips,omitempty\\"" }',
        [gojson.Field("ipRanges", RANGE_SETS, "IPRanges"), gojson.Field("ips", IPS, "IPs")],
    ), "RuntimeConfig"),
    gojson.Field("args", gojson.Ptr(gojson.Struct(
        'struct { A *allocator.IPAMArgs "json:\\"cni\\"" }',
        [gojson.Field("cni", gojson.Ptr(IPAM_ARGS), "A")],
    )), "Args"),
])


# -- ranges -----------------------------------------------------------------------------------


class RawRange(FrozenRecord):
    """A range as written, before canonicalisation (every field optional)."""

    __slots__ = _fields = ("subnet", "start", "end", "gateway")
    subnet: Optional[tuple[IP, int, int]]
    start: Optional[IP]
    end: Optional[IP]
    gateway: Optional[IP]

    def __init__(
        self,
        subnet: Optional[tuple[IP, int, int]] = None,
        start: Optional[IP] = None,
        end: Optional[IP] = None,
        gateway: Optional[IP] = None,
    ) -> None:
        self._assign(subnet=subnet, start=start, end=end, gateway=gateway)

    @classmethod
    def from_decoded(cls, d: dict) -> "RawRange":
        """From a dict decoded with :data:`RANGE` (or the range fields of :data:`IPAM_CONFIG`).

        The subnet becomes (canonical address, prefix, bits of the written family): the width of
        the mask as written (128 for ``::ffff:10.0.0.0/120``), which the reference compares with
        the canonical address to report a version mismatch.
        """
        iface = d["subnet"]
        subnet = None
        if iface is not None:
            subnet = (canonical(iface.ip), iface.network.prefixlen, iface.max_prefixlen)
        return cls(subnet, d["rangeStart"], d["rangeEnd"], d["gateway"])


def _last_ip(net: Network) -> IP:
    """The default range end: IPv4 broadcast minus one; IPv6 the all-ones address itself."""
    last = net.broadcast_address
    return last - 1 if net.version == 4 else last


def canonicalize_range(raw: RawRange) -> Range:
    """Go's ``Range.Canonicalize``, same checks in the same order, same messages."""
    if raw.subnet is None:
        raise plugin_error("IP <nil> not v4 nor v6")
    ip, prefix, bits = raw.subnet
    if prefix > bits - 2:
        raise plugin_error(f"Network {ip}/{prefix} too small to allocate from")
    if ip.max_prefixlen != bits:
        raise plugin_error("IPNet IP and Mask version mismatch")
    net = ipaddress.ip_network(f"{ip}/{prefix}", strict=False)
    if net.network_address != ip:
        raise plugin_error(
            f"Network has host bits set. For a subnet mask of length {prefix} "
            f"the network address is {net.network_address}"
        )
    first = net.network_address + 1
    gateway = raw.gateway if raw.gateway is not None else first
    # The reference validates with Range.Contains on the half-built range: a bound that was not
    # written is still nil and skipped, a written rangeEnd already bounds rangeStart.
    if raw.start is not None:
        if not _in_open_range(raw.start, net, None, raw.end):
            raise plugin_error(f"RangeStart {raw.start} not in network {net}")
        start = raw.start
    else:
        start = first
    if raw.end is not None:
        if not _in_open_range(raw.end, net, start, None):
            raise plugin_error(f"RangeEnd {raw.end} not in network {net}")
        end = raw.end
    else:
        end = _last_ip(net)
    return Range(subnet=net, gateway=gateway, start=start, end=end)


def _in_open_range(ip: IP, net: Network, start: Optional[IP], end: Optional[IP]) -> bool:
    if ip.version != net.version or ip not in net:
        return False
    if start is not None and int(ip) < int(start):
        return False
    if end is not None and int(ip) > int(end):
        return False
    return True


def canonicalize_range_set(raws: list[RawRange]) -> RangeSet:
    """Go's ``RangeSet.Canonicalize``: non-empty, one family, no overlap inside the set."""
    if not raws:
        raise plugin_error("empty range set")
    ranges: list[Range] = []
    for raw in raws:
        r = canonicalize_range(raw)
        if ranges and r.family != ranges[0].family:
            raise plugin_error("mixed address families")
        ranges.append(r)
    for i, r1 in enumerate(ranges):
        for r2 in ranges[i + 1 :]:
            if r1.overlaps(r2):
                raise plugin_error(f"subnets {r1} and {r2} overlap")
    return RangeSet(tuple(ranges))


# -- requested addresses ----------------------------------------------------------------------


def _requested_ips(d: dict, cni_args: str) -> list[IP]:
    """CNI_ARGS ``IP=``, then ``args.cni.ips``, then ``runtimeConfig.ips``: the reference's order."""
    out: list[IP] = []
    if cni_args:
        env = parse_cni_args(cni_args, known={"IP"})
        if "IP" in env and env["IP"] != "":
            ip = parse_ip_or_cidr(env["IP"])
            if ip is None:
                raise plugin_error(
                    f'ARGS: error parsing value of pair "IP={env["IP"]}": invalid IP address {env["IP"]}'
                )
            out.append(ip)
    args = d["args"]
    cni = args["cni"] if args is not None else None
    for value in (cni["ips"] if cni is not None else None, d["runtimeConfig"]["ips"]):
        for item in value or ():
            if item is None:  # a null *ip.IP: the reference dereferences it and panics
                continue
            if item == "":
                raise plugin_error("cannot understand ip: IP <nil> not v4 nor v6")
            out.append(item)
    return out


# -- routes -----------------------------------------------------------------------------------


def _routes(value: Optional[list], strict: bool) -> tuple[Route, ...]:
    """The result's routes.  A route without ``dst`` (which the reference copies into the result
    as ``<nil>``) fails ADD only: routes matter to no other command, which skips it."""
    out = []
    for item in value or ():
        if item is None:
            continue
        if item["dst"] is None:
            if strict:
                raise plugin_error('route is missing "dst"')
            continue
        out.append(Route.from_decoded(item))
    return tuple(out)


# -- the loader -------------------------------------------------------------------------------


def load(conf: dict, cni_args: str = "", *, strict: bool = True) -> IpamConfig:
    """Go's ``allocator.LoadIPAMConfig``: the full network config in, a validated config out.

    ``strict`` is for ADD; other commands skip what only ADD uses and ADD would refuse."""
    d = gojson.decode(conf, SCHEMA)
    ipam = d["ipam"]
    if ipam is None:
        raise plugin_error("IPAM config missing 'ipam' key")

    requested = _requested_ips(d, cni_args)

    raw_sets: list[list[RawRange]] = []
    raw_sets.extend([RawRange.from_decoded(r) for r in rs or ()] for rs in d["runtimeConfig"]["ipRanges"] or ())
    legacy = RawRange.from_decoded(ipam)
    if legacy.subnet is not None:
        raw_sets.append([legacy])
    raw_sets.extend([RawRange.from_decoded(r) for r in rs or ()] for rs in ipam["ranges"] or ())
    if not raw_sets:
        raise plugin_error("no IP ranges specified")

    sets: list[RangeSet] = []
    for i, raws in enumerate(raw_sets):
        try:
            sets.append(canonicalize_range_set(raws))
        except CniError as exc:
            raise plugin_error(f"invalid range set {i}: {exc.msg}") from None

    version_text = d["cniVersion"]
    if _count_per_family(sets) > 1 and not _at_least_030(version_text):
        raise plugin_error(
            f"CNI version {version_text} does not support more than 1 address per family"
        )

    for i, s1 in enumerate(sets):
        for j in range(i + 1, len(sets)):
            if s1.overlaps(sets[j]):
                raise plugin_error(f"range set {i} overlaps with {j}")

    return IpamConfig(
        name=d["name"],
        cni_version=version_text,
        ranges=tuple(sets),
        routes=_routes(ipam["routes"], strict),
        data_dir=ipam["dataDir"] or DEFAULT_DATA_DIR,
        resolv_conf=ipam["resolvConf"],
        requested_ips=tuple(requested),
    )


def _count_per_family(sets: Iterable[RangeSet]) -> int:
    counts = {4: 0, 6: 0}
    for s in sets:
        counts[s.family] += 1
    return max(counts.values())


def _at_least_030(version: str) -> bool:
    try:
        return parse_version(version) >= (0, 3, 0)
    except CniError:  # an unparsable version is "not >= 0.3.0", as in libcni
        return False


def status_data_dir(conf: Any) -> str:
    """STATUS's only input: ``ipam.dataDir`` (default when absent or not a string).

    Read leniently, unlike :func:`load`: STATUS is a node-health call (containerd 2.1+ turns the
    node NotReady on its failure), so a key it does not need, or a bad type, must not fail it.
    """
    from cnichain.common.health import conf_str

    return conf_str(conf, "ipam", "dataDir") or DEFAULT_DATA_DIR
