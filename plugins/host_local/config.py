"""host-local's IPAM configuration: parsing and validation, with the reference's error texts.

The reference decodes the whole network config with Go's ``encoding/json`` into
``allocator.Net`` and then canonicalises every range.  Runtimes and operators match on its error
strings, so this module reproduces them word for word (``invalid range set 0: Network has host
bits set...``).  The decoding itself is :mod:`cnichain.common.gojson` driven by :data:`SCHEMA`, a
copy of the reference's structs: keys match case-insensitively (containerd's go-cni sends
``ipRanges`` as ``[[{"Subnet": ..., "RangeStart": ""}]]``), ``""`` leaves a ``net.IP`` unset,
``null`` leaves a field at its zero value, and a wrong JSON type fails with Go's text.  The
range checks (``Range.Canonicalize`` and the checks across range sets) are :mod:`.ranges`'s.

Everything here is pure: no files are read (``resolvConf`` is read by the plugin at ADD time).
The records are :mod:`cnichain.common.record` classes rather than dataclasses, and ``typing`` is
imported for annotations only: host-local runs once per pod ADD and DEL, and those two imports
were about a third of its exec time (see benchmarks/README.md).
"""

from __future__ import annotations

from cnichain.common import gojson
from cnichain.common.cniargs import parse_cni_args
from cnichain.common.errors import CniError, plugin_error
from cnichain.common.goip import parse_ip_or_cidr
from cnichain.common.record import FrozenRecord
from cnichain.common.types import ROUTE, Route
from cnichain.common.version import parse as parse_version

from .ranges import RawRange, canonicalize_range_sets, most_per_family, require_disjoint

TYPE_CHECKING = False
if TYPE_CHECKING:  # annotations only
    from typing import Any, Optional

    from .ranges import IP, RangeSet

DEFAULT_DATA_DIR = "/var/lib/cni/networks"


# -- typed configuration ---------------------------------------------------------------------


class IpamConfig(FrozenRecord):
    """What host-local needs from one invocation's network config."""

    name: str
    cni_version: str
    ranges: tuple[RangeSet, ...]
    routes: tuple[Route, ...] = ()
    data_dir: str = DEFAULT_DATA_DIR
    resolv_conf: str = ""
    requested_ips: tuple[IP, ...] = ()


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

    sets = canonicalize_range_sets(raw_sets)
    version_text = d["cniVersion"]
    if most_per_family(sets) > 1 and not _at_least_030(version_text):
        raise plugin_error(
            f"CNI version {version_text} does not support more than 1 address per family"
        )
    require_disjoint(sets)

    return IpamConfig(
        name=d["name"],
        cni_version=version_text,
        ranges=sets,
        routes=_routes(ipam["routes"], strict),
        data_dir=ipam["dataDir"] or DEFAULT_DATA_DIR,
        resolv_conf=ipam["resolvConf"],
        requested_ips=tuple(requested),
    )


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
