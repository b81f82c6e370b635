"""Typed CNI results and their conversion between every supported spec version.

Plugins build and modify a :class:`Result` in the 1.x shape and the skeleton prints it in the
version the network config asked for, exactly as libcni's ``PrintResult`` does.  Parsing accepts any
supported version, so a ``prevResult`` written as 0.2.0 or 1.1.0 comes in as the same object.
"""

from __future__ import annotations

from . import gojson
from .errors import CniError, Code
from .record import Record
from .version import ALL, parse as parse_version

TYPE_CHECKING = False
if TYPE_CHECKING:  # annotations only: importing typing costs milliseconds on every exec
    from typing import Any


def ip_family(address: str) -> int:
    """4 or 6, judged from an address or CIDR string without importing ipaddress."""
    return 6 if ":" in address else 4


class Interface(Record):
    name: str
    mac: str = ""
    sandbox: str = ""
    mtu: int | None = None
    socket_path: str = ""
    pci_id: str = ""

    @classmethod
    def from_decoded(cls, d: dict) -> "Interface":
        """From a dict decoded with :data:`INTERFACE`."""
        return cls(
            name=d["name"],
            mac=d["mac"],
            sandbox=d["sandbox"],
            mtu=d["mtu"] or None,
            socket_path=d["socketPath"],
            pci_id=d["pciID"],
        )

    def to_dict(self, version: str) -> dict:
        out: dict[str, Any] = {"name": self.name}
        if self.mac:
            out["mac"] = self.mac
        if parse_version(version) >= (1, 0, 0):
            if self.mtu:
                out["mtu"] = self.mtu
        if self.sandbox:
            out["sandbox"] = self.sandbox
        if parse_version(version) >= (1, 0, 0):
            if self.socket_path:
                out["socketPath"] = self.socket_path
            if self.pci_id:
                out["pciID"] = self.pci_id
        return out


class IPConfig(Record):
    address: str  # CIDR keeping the host part, e.g. "10.1.0.5/16"
    gateway: str = ""
    interface: int | None = None

    @property
    def family(self) -> int:
        return ip_family(self.address)

    @classmethod
    def from_decoded(cls, d: dict) -> "IPConfig":
        """From a dict decoded with :data:`IP_CONFIG`."""
        if d["address"] is None:
            raise CniError(Code.DECODING_FAILURE, "ips entry needs an address")
        return cls(address=str(d["address"]), gateway=_ip_text(d["gateway"]), interface=d["interface"])

    def to_dict(self, version: str) -> dict:
        out: dict[str, Any] = {}
        if parse_version(version) < (1, 0, 0):
            out["version"] = str(self.family)
        if self.interface is not None:
            out["interface"] = self.interface
        out["address"] = self.address
        if self.gateway:
            out["gateway"] = self.gateway
        return out


class Route(Record):
    dst: str
    gw: str = ""
    mtu: int | None = None
    advmss: int | None = None
    priority: int | None = None
    table: int | None = None
    scope: int | None = None

    @property
    def family(self) -> int:
        return ip_family(self.dst)

    @classmethod
    def from_decoded(cls, d: dict) -> "Route":
        """From a dict decoded with :data:`ROUTE`."""
        if d["dst"] is None:
            raise CniError(Code.DECODING_FAILURE, "route entry needs a dst")
        return cls(
            dst=str(d["dst"]),
            gw=_ip_text(d["gw"]),
            mtu=d["mtu"] or None,
            advmss=d["advmss"] or None,
            priority=d["priority"] or None,
            table=d["table"],
            scope=d["scope"],
        )

    def to_dict(self, version: str = "1.1.0") -> dict:
        out: dict[str, Any] = {"dst": self.dst}
        if self.gw:
            out["gw"] = self.gw
        if parse_version(version) >= (0, 3, 0):
            for key in ("mtu", "advmss", "priority", "table", "scope"):
                value = getattr(self, key)
                if value is not None:
                    out[key] = value
        return out


class DNS(Record):
    nameservers: list[str]
    domain: str
    search: list[str]
    options: list[str]

    def __init__(  # a fresh list per instance
        self,
        nameservers: list[str] | None = None,
        domain: str = "",
        search: list[str] | None = None,
        options: list[str] | None = None,
    ) -> None:
        self.nameservers = [] if nameservers is None else nameservers
        self.domain = domain
        self.search = [] if search is None else search
        self.options = [] if options is None else options

    @classmethod
    def from_dict(cls, d: Any) -> "DNS":
        """A raw ``dns`` object (a config's or a result's), decoded as libcni's ``types.DNS``."""
        return cls.from_decoded(gojson.decode(d, DNS_SCHEMA))

    @classmethod
    def from_decoded(cls, d: dict) -> "DNS":
        return cls(
            nameservers=list(d["nameservers"] or ()),
            domain=d["domain"],
            search=list(d["search"] or ()),
            options=list(d["options"] or ()),
        )

    def is_empty(self) -> bool:
        return not (self.nameservers or self.domain or self.search or self.options)

    def to_dict(self) -> dict:
        out: dict[str, Any] = {}
        if self.nameservers:
            out["nameservers"] = list(self.nameservers)
        if self.domain:
            out["domain"] = self.domain
        if self.search:
            out["search"] = list(self.search)
        if self.options:
            out["options"] = list(self.options)
        return out


class Result(Record):
    """A CNI result held in the 1.x shape, whatever version it was read from."""

    cni_version: str
    interfaces: list[Interface]
    ips: list[IPConfig]
    routes: list[Route]
    dns: DNS

    def __init__(  # fresh lists per instance
        self,
        cni_version: str = "1.1.0",
        interfaces: list[Interface] | None = None,
        ips: list[IPConfig] | None = None,
        routes: list[Route] | None = None,
        dns: DNS | None = None,
    ) -> None:
        self.cni_version = cni_version
        self.interfaces = [] if interfaces is None else interfaces
        self.ips = [] if ips is None else ips
        self.routes = [] if routes is None else routes
        self.dns = DNS() if dns is None else dns

    # -- reading ---------------------------------------------------------------------------
    @classmethod
    def from_dict(cls, d: dict, version: str | None = None) -> "Result":
        """Decode a result written in ``version`` (default: its own ``cniVersion``)."""
        if not isinstance(d, dict):
            raise CniError(Code.DECODING_FAILURE, "result is not a JSON object")
        if version is None:
            version = gojson.decode(d, VERSION_ONLY)["cniVersion"] or "0.1.0"
        if version not in ALL:
            raise CniError(Code.INCOMPATIBLE_VERSION, f"unsupported result version {version!r}")
        if parse_version(version) < (0, 3, 0):
            return cls._from_020(gojson.decode(d, RESULT_020), version)
        r = gojson.decode(d, RESULT)
        return cls(
            cni_version=version,
            interfaces=[Interface.from_decoded(i) for i in r["interfaces"] or ()],
            ips=[IPConfig.from_decoded(i) for i in r["ips"] or ()],
            routes=[Route.from_decoded(x) for x in r["routes"] or ()],
            dns=DNS.from_decoded(r["dns"]),
        )

    @classmethod
    def _from_020(cls, r: dict, version: str) -> "Result":
        res = cls(cni_version=version, dns=DNS.from_decoded(r["dns"]))
        for key in ("ip4", "ip6"):
            block = r[key]
            if block is None:
                continue
            if block["ip"] is None:
                raise CniError(Code.DECODING_FAILURE, f"{key} needs an ip")
            res.ips.append(IPConfig(address=str(block["ip"]), gateway=_ip_text(block["gateway"])))
            res.routes.extend(Route.from_decoded(x) for x in block["routes"] or ())
        return res

    # -- writing ---------------------------------------------------------------------------
    def to_dict(self, version: str) -> dict:
        """The result as the JSON object a plugin of spec ``version`` prints."""
        if version not in ALL:
            raise CniError(Code.INCOMPATIBLE_VERSION, f"cannot convert result to version {version!r}")
        if parse_version(version) < (0, 3, 0):
            return self._to_020(version)
        out: dict[str, Any] = {"cniVersion": version}
        if self.interfaces:
            out["interfaces"] = [i.to_dict(version) for i in self.interfaces]
        if self.ips:
            out["ips"] = [ip.to_dict(version) for ip in self.ips]
        if self.routes:
            out["routes"] = [r.to_dict(version) for r in self.routes]
        if parse_version(version) < (1, 0, 0) or not self.dns.is_empty():
            out["dns"] = self.dns.to_dict()
        return out

    def _to_020(self, version: str) -> dict:
        out: dict[str, Any] = {"cniVersion": version}
        first: dict[int, IPConfig] = {}
        for cfg in self.ips:
            first.setdefault(cfg.family, cfg)
        if not first:
            raise CniError(Code.INCOMPATIBLE_VERSION, "cannot convert: no valid IP addresses")
        for fam, key in ((4, "ip4"), (6, "ip6")):
            ip = first.get(fam)
            if ip is None:
                continue
            block: dict[str, Any] = {"ip": ip.address}
            if ip.gateway:
                block["gateway"] = ip.gateway
            routes = [r.to_dict("0.2.0") for r in self.routes if r.family == fam]
            if routes:
                block["routes"] = routes
            out[key] = block
        out["dns"] = self.dns.to_dict()  # Go prints the (struct) dns field even when empty
        return out

    # -- helpers plugins share -------------------------------------------------------------
    def sandbox_interface_indexes(self) -> list[int]:
        return [i for i, iface in enumerate(self.interfaces) if iface.sandbox]

    def find_interface(self, name: str, *, in_sandbox: bool | None = None) -> int | None:
        for idx, iface in enumerate(self.interfaces):
            if iface.name != name:
                continue
            if in_sandbox is None or bool(iface.sandbox) == in_sandbox:
                return idx
        return None


def _ip_text(value: Any) -> str:
    return "" if value is None else str(value)


# libcni's result types as Go decodes them (types100 / types040 share these field names).
INTERFACE = gojson.Struct("types100.Interface", [
    ("name", gojson.STRING),
    gojson.Field("mac", gojson.STRING, "Mac"),
    gojson.Field("mtu", gojson.INT, "Mtu"),
    ("sandbox", gojson.STRING),
    ("socketPath", gojson.STRING),
    gojson.Field("pciID", gojson.STRING, "PciID"),
])
_IP_CONFIG_FIELDS = gojson.Struct("types100.ipConfig", [
    ("interface", gojson.Ptr(gojson.INT)),
    ("address", gojson.CIDR),
    ("gateway", gojson.IP),
])
_ROUTE_FIELDS = gojson.Struct("types.route", [
    ("dst", gojson.CIDR),
    gojson.Field("gw", gojson.IP, "GW"),
    gojson.Field("mtu", gojson.INT, "MTU"),
    gojson.Field("advmss", gojson.INT, "AdvMSS"),
    ("priority", gojson.INT),
    ("table", gojson.Ptr(gojson.INT)),
    ("scope", gojson.Ptr(gojson.INT)),
])
DNS_SCHEMA = gojson.Struct("types.DNS", [
    ("nameservers", gojson.List(gojson.STRING)),
    ("domain", gojson.STRING),
    ("search", gojson.List(gojson.STRING)),
    ("options", gojson.List(gojson.STRING)),
])
# types.Route and types100.IPConfig decode through their own UnmarshalJSON (see gojson.Custom).
ROUTE = gojson.Custom(_ROUTE_FIELDS, "types.Route")
IP_CONFIG = gojson.Custom(_IP_CONFIG_FIELDS, "types100.IPConfig")
VERSION_ONLY = gojson.Struct("", [gojson.Field("cniVersion", gojson.STRING, "CNIVersion")])
RESULT = gojson.Struct("types100.Result", [
    gojson.Field("cniVersion", gojson.STRING, "CNIVersion"),
    ("interfaces", gojson.List(gojson.Ptr(INTERFACE))),
    gojson.Field("ips", gojson.List(gojson.Ptr(IP_CONFIG)), "IPs"),
    ("routes", gojson.List(gojson.Ptr(ROUTE))),
    gojson.Field("dns", DNS_SCHEMA, "DNS"),
])
_IP_CONFIG_020 = gojson.Struct("types020.IPConfig", [
    gojson.Field("ip", gojson.CIDR, "IP"),
    ("gateway", gojson.IP),
    ("routes", gojson.List(ROUTE)),
])
RESULT_020 = gojson.Struct("types020.Result", [
    gojson.Field("cniVersion", gojson.STRING, "CNIVersion"),
    gojson.Field("ip4", gojson.Ptr(_IP_CONFIG_020), "IP4"),
    gojson.Field("ip6", gojson.Ptr(_IP_CONFIG_020), "IP6"),
    gojson.Field("dns", DNS_SCHEMA, "DNS"),
])
