"""bridge network config: parse and validate into a frozen record before anything touches the kernel.

Keys, defaults and error texts follow the reference bridge plugin (plugins-and-spec.md section 6.1),
including Go's JSON type errors, so a config that the reference rejects is rejected here with the
same message.  Unknown keys are ignored, as the reference does (minikube sends ``"addIf": "true"``).
Values that end up in kernel object names or ``/proc/sys`` paths (bridge name, MAC) are checked here.
"""

from __future__ import annotations

import re

from cnichain.common.cniargs import parse_cni_args
from cnichain.common.errors import plugin_error
from cnichain.common.record import FrozenRecord

TYPE_CHECKING = False
if TYPE_CHECKING:  # annotations only: typing and dataclasses cost ~10 ms per exec together
    from typing import Any, Optional

DEFAULT_BRIDGE = "cni0"
_MAC_RE = re.compile(r"^[0-9a-fA-F]{2}([:-])[0-9a-fA-F]{2}(\1[0-9a-fA-F]{2}){4}$")
_BOOL_KEYS = {
    "isGateway": "is_gateway",
    "isDefaultGateway": "is_default_gateway",
    "forceAddress": "force_address",
    "ipMasq": "ip_masq",
    "hairpinMode": "hairpin_mode",
    "promiscMode": "promisc_mode",
    "preserveDefaultVlan": "preserve_default_vlan",
    "macspoofchk": "macspoofchk",
    "enabledad": "enable_dad",
    "disableContainerInterface": "disable_container_interface",
    "portIsolation": "port_isolation",
}


class BridgeConfig(FrozenRecord):
    """The validated network config of one bridge invocation (immutable)."""

    __slots__ = _fields = (
        "network", "cni_version", "bridge", "is_gateway", "is_default_gateway", "force_address",
        "ip_masq", "hairpin_mode", "promisc_mode", "preserve_default_vlan", "macspoofchk",
        "enable_dad", "disable_container_interface", "port_isolation", "mtu", "vlan", "vlan_trunk",
        "ipam_type", "dns", "mac",
    )
    network: str
    cni_version: str
    bridge: str
    is_gateway: bool
    is_default_gateway: bool
    force_address: bool
    ip_masq: bool
    hairpin_mode: bool
    promisc_mode: bool
    preserve_default_vlan: bool
    macspoofchk: bool
    enable_dad: bool
    disable_container_interface: bool
    port_isolation: bool
    mtu: int
    vlan: int
    vlan_trunk: tuple[int, ...]
    ipam_type: str
    dns: dict
    mac: str

    def __init__(
        self,
        network: str,
        cni_version: str,
        bridge: str = DEFAULT_BRIDGE,
        is_gateway: bool = False,
        is_default_gateway: bool = False,
        force_address: bool = False,
        ip_masq: bool = False,
        hairpin_mode: bool = False,
        promisc_mode: bool = False,
        preserve_default_vlan: bool = False,
        macspoofchk: bool = False,
        enable_dad: bool = False,
        disable_container_interface: bool = False,
        port_isolation: bool = False,
        mtu: int = 0,
        vlan: int = 0,
        vlan_trunk: tuple[int, ...] = (),
        ipam_type: str = "",
        dns: Optional[dict] = None,
        mac: str = "",
    ) -> None:
        self._assign(
            network, cni_version, bridge, is_gateway, is_default_gateway, force_address, ip_masq,
            hairpin_mode, promisc_mode, preserve_default_vlan, macspoofchk, enable_dad,
            disable_container_interface, port_isolation, mtu, vlan, vlan_trunk, ipam_type,
            {} if dns is None else dns, mac,
        )

    @property
    def is_layer3(self) -> bool:
        return bool(self.ipam_type)

    @property
    def needs_vlan_filtering(self) -> bool:
        return bool(self.vlan or self.vlan_trunk)


def _json_kind(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, (int, float)):
        return f"number {value}" if not isinstance(value, bool) else "bool"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "array"
    return "object"


def _fail(msg: str):
    return plugin_error(f"failed to load netconf: {msg}")


def _type_error(value: Any, key: str, go_type: str):
    return _fail(f"json: cannot unmarshal {_json_kind(value)} into Go struct field NetConf.{key} of type {go_type}")


def _bool(conf: dict, key: str) -> bool:
    value = conf.get(key)
    if value is None:
        return False
    if not isinstance(value, bool):
        raise _type_error(value, key, "bool")
    return value


def _int(conf: dict, key: str) -> int:
    value = conf.get(key)
    if value is None:
        return 0
    if isinstance(value, bool) or not isinstance(value, (int, float)) or int(value) != value:
        raise _type_error(value, key, "int")
    return int(value)


def _str(conf: dict, key: str, default: str = "") -> str:
    value = conf.get(key, default)
    if value is None:
        return default
    if not isinstance(value, str):
        raise _type_error(value, key, "string")
    return value


def validate_link_name(name: str, what: str) -> str:
    """A name we create in the host namespace and put into a sysctl path: the kernel's rules."""
    if not name or len(name) > 15 or name in (".", "..") or any(c in "/:\0" or c.isspace() for c in name):
        raise _fail(f"invalid {what} name {name!r}")
    return name


def parse_mac(value: str) -> str:
    """``AA-bb-...`` -> ``aa:bb:...``; only 6-byte Ethernet addresses fit a veth."""
    if not _MAC_RE.match(value):
        raise plugin_error(f'invalid MAC address "{value}"')
    return value.replace("-", ":").lower()


def _trunk(raw: Any) -> tuple[int, ...]:
    if raw is None:
        return ()
    if not isinstance(raw, list):
        raise _type_error(raw, "vlanTrunk", "[]*bridge.VlanTrunk")
    vids: list[int] = []
    for item in raw:
        if not isinstance(item, dict):
            raise _type_error(item, "vlanTrunk", "bridge.VlanTrunk")
        vid, lo, hi = item.get("id"), item.get("minID"), item.get("maxID")
        for key, v in (("id", vid), ("minID", lo), ("maxID", hi)):
            if v is not None and (isinstance(v, bool) or not isinstance(v, int)):
                raise _type_error(v, f"vlanTrunk.{key}", "int")
        if vid is not None:
            if not 0 < vid <= 4094:
                raise plugin_error("incorrect trunk id parameter")
            vids.append(vid)
        if lo is not None and hi is not None:
            if not 0 < lo <= 4094:
                raise plugin_error("incorrect trunk minID parameter")
            if not 0 < hi <= 4094:
                raise plugin_error("incorrect trunk maxID parameter")
            if lo > hi:
                raise plugin_error("minID is greater than maxID in trunk parameter")
            vids.extend(range(lo, hi + 1))
        elif lo is not None:
            raise plugin_error("minID and maxID should be configured simultaneously, maxID is missing")
        elif hi is not None:
            raise plugin_error("minID and maxID should be configured simultaneously, minID is missing")
    return tuple(sorted(set(vids)))


def _mac_from_request(conf: dict, cni_args: str) -> str:
    """Container MAC with the reference precedence: CNI_ARGS < args.cni.mac < runtimeConfig.mac."""
    mac = ""
    if cni_args:
        mac = parse_cni_args(cni_args, {"MAC"}).get("MAC", "")
    args = conf.get("args")
    cni = args.get("cni") if isinstance(args, dict) else None
    if isinstance(cni, dict) and isinstance(cni.get("mac"), str) and cni["mac"]:
        mac = cni["mac"]
    runtime = conf.get("runtimeConfig")
    if isinstance(runtime, dict) and isinstance(runtime.get("mac"), str) and runtime["mac"]:
        mac = runtime["mac"]
    return parse_mac(mac) if mac else ""


def load_config(conf: dict, cni_args: str = "", *, with_mac: bool = True) -> BridgeConfig:
    """Validate the whole network config (stdin) of a bridge invocation."""
    values: dict[str, Any] = {attr: _bool(conf, key) for key, attr in _BOOL_KEYS.items()}
    bridge = _str(conf, "bridge", DEFAULT_BRIDGE) or DEFAULT_BRIDGE
    validate_link_name(bridge, "bridge")
    mtu = _int(conf, "mtu")
    if mtu < 0 or mtu > 65535:
        raise _fail(f"invalid MTU {mtu}")
    vlan = _int(conf, "vlan")
    if vlan < 0 or vlan > 4094:
        raise plugin_error(f"invalid VLAN ID {vlan} (must be between 0 and 4094)")
    trunk = _trunk(conf.get("vlanTrunk"))
    backend = _str(conf, "ipMasqBackend")
    if backend not in ("", "iptables", "nftables"):
        raise plugin_error(f'unknown ipmasq backend "{backend}"')
    ipam = conf.get("ipam")
    if ipam is not None and not isinstance(ipam, dict):
        raise _type_error(ipam, "ipam", "types.IPAM")
    ipam_type = ipam.get("type", "") if isinstance(ipam, dict) else ""
    if not isinstance(ipam_type, str):
        raise _type_error(ipam_type, "ipam.type", "string")
    dns = conf.get("dns")
    if dns is not None and not isinstance(dns, dict):
        raise _type_error(dns, "dns", "types.DNS")
    if values["is_default_gateway"]:
        values["is_gateway"] = True
    if values["hairpin_mode"] and values["promisc_mode"]:
        raise plugin_error("cannot set hairpin mode and promiscuous mode at the same time.")
    if values["disable_container_interface"] and ipam_type:
        raise plugin_error("cannot use IPAM when DisableContainerInterface flag is set")
    if vlan and values["is_gateway"]:
        # The reference puts the gateway on an extra "<bridge>.<vlan>" veth; not implemented here.
        raise plugin_error("isGateway together with vlan is not supported by this bridge plugin")
    return BridgeConfig(
        network=str(conf.get("name", "")),
        cni_version=str(conf.get("cniVersion") or "0.1.0"),
        bridge=bridge,
        mtu=mtu,
        vlan=vlan,
        vlan_trunk=trunk,
        ipam_type=ipam_type,
        dns=dict(dns or {}),
        mac=_mac_from_request(conf, cni_args) if with_mac else "",
        **values,
    )


def ipam_type_of(conf: dict) -> Optional[str]:
    ipam = conf.get("ipam")
    value = ipam.get("type") if isinstance(ipam, dict) else None
    return value if isinstance(value, str) and value else None
