"""Typed CNI results and their conversion between every supported spec version.

Plugins build and modify a :class:`Result` in the 1.x shape and the skeleton prints it in the
version the network config asked for, exactly as libcni's ``PrintResult`` does.  Parsing accepts any
supported version, so a ``prevResult`` written as 0.2.0 or 1.1.0 comes in as the same object.
"""

from __future__ import annotations

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
    _fields = ("name", "mac", "sandbox", "mtu", "socket_path", "pci_id")

    def __init__(
        self, name: str, mac: str = "", sandbox: str = "", mtu: int | None = None, socket_path: str = "", pci_id: str = ""
    ) -> None:
        self.name = name
        self.mac = mac
        self.sandbox = sandbox
        self.mtu = mtu
        self.socket_path = socket_path
        self.pci_id = pci_id

    @classmethod
    def from_dict(cls, d: dict) -> "Interface":
        if not isinstance(d, dict):
            raise ValueError("interface entry is not an object")
        return cls(
            name=str(d.get("name", "")),
            mac=str(d.get("mac", "") or ""),
            sandbox=str(d.get("sandbox", "") or ""),
            mtu=_opt_int(d.get("mtu")),
            socket_path=str(d.get("socketPath", "") or ""),
            pci_id=str(d.get("pciID", "") or ""),
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
    _fields = ("address", "gateway", "interface")

    def __init__(self, address: str, gateway: str = "", interface: int | None = None) -> None:
        self.address = address  # CIDR keeping the host part, e.g. "10.1.0.5/16"
        self.gateway = gateway
        self.interface = interface

    @property
    def family(self) -> int:
        return ip_family(self.address)

    @classmethod
    def from_dict(cls, d: dict) -> "IPConfig":
        if not isinstance(d, dict) or not d.get("address"):
            raise ValueError("ips entry needs an address")
        iface = d.get("interface")
        return cls(
            address=str(d["address"]),
            gateway=str(d.get("gateway", "") or ""),
            interface=None if iface is None else int(iface),
        )

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
    _fields = ("dst", "gw", "mtu", "advmss", "priority", "table", "scope")

    def __init__(
        self,
        dst: str,
        gw: str = "",
        mtu: int | None = None,
        advmss: int | None = None,
        priority: int | None = None,
        table: int | None = None,
        scope: int | None = None,
    ) -> None:
        self.dst = dst
        self.gw = gw
        self.mtu = mtu
        self.advmss = advmss
        self.priority = priority
        self.table = table
        self.scope = scope

    @property
    def family(self) -> int:
        return ip_family(self.dst)

    @classmethod
    def from_dict(cls, d: dict) -> "Route":
        if not isinstance(d, dict) or not d.get("dst"):
            raise ValueError("route entry needs a dst")
        return cls(
            dst=str(d["dst"]),
            gw=str(d.get("gw", "") or ""),
            mtu=_opt_int(d.get("mtu")),
            advmss=_opt_int(d.get("advmss")),
            priority=_opt_int(d.get("priority")),
            table=_opt_int(d.get("table")),
            scope=_opt_int(d.get("scope")),
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
    _fields = ("nameservers", "domain", "search", "options")

    def __init__(
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
        if not d:
            return cls()
        if not isinstance(d, dict):
            raise ValueError("dns is not an object")
        return cls(
            nameservers=[str(x) for x in d.get("nameservers") or []],
            domain=str(d.get("domain", "") or ""),
            search=[str(x) for x in d.get("search") or []],
            options=[str(x) for x in d.get("options") or []],
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

    _fields = ("cni_version", "interfaces", "ips", "routes", "dns")

    def __init__(
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
        version = version or str(d.get("cniVersion") or "0.1.0")
        if version not in ALL:
            raise CniError(Code.INCOMPATIBLE_VERSION, f"unsupported result version {version!r}")
        try:
            if parse_version(version) < (0, 3, 0):
                return cls._from_020(d, version)
            return cls(
                cni_version=version,
                interfaces=[Interface.from_dict(i) for i in d.get("interfaces") or []],
                ips=[IPConfig.from_dict(i) for i in d.get("ips") or []],
                routes=[Route.from_dict(r) for r in d.get("routes") or []],
                dns=DNS.from_dict(d.get("dns")),
            )
        except (ValueError, TypeError) as exc:
            raise CniError(Code.DECODING_FAILURE, f"failed to decode result: {exc}") from None

    @classmethod
    def _from_020(cls, d: dict, version: str) -> "Result":
        res = cls(cni_version=version, dns=DNS.from_dict(d.get("dns")))
        for key in ("ip4", "ip6"):
            block = d.get(key)
            if not block:
                continue
            if not isinstance(block, dict) or not block.get("ip"):
                raise ValueError(f"{key} needs an ip")
            res.ips.append(IPConfig(address=str(block["ip"]), gateway=str(block.get("gateway") or "")))
            res.routes.extend(Route.from_dict(r) for r in block.get("routes") or [])
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
        for ip in self.ips:
            first.setdefault(ip.family, ip)
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


def _opt_int(value: Any) -> int | None:
    if value is None:
        return None
    return int(value)
