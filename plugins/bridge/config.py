"""bridge network config: parse and validate into a frozen record before anything touches the kernel.

Keys, defaults and error texts follow the reference bridge plugin.
The decoding is :mod:`cnichain.common.gojson` driven by :data:`SCHEMA`, a copy of the reference's
``NetConf`` (libcni's ``types.NetConf`` embedded): keys match case-insensitively (``IsGateway``,
``IPMasq``), ``null`` leaves the default, and a wrong JSON type fails with Go's text, so a config
the reference rejects is rejected here with the same message.  Unknown keys are ignored, as the
reference does (minikube sends ``"addIf": "true"``).  Values that end up in kernel object names or
``/proc/sys`` paths (bridge name, MAC) are checked here.
"""

from __future__ import annotations

import re

from cnichain.common import gojson
from cnichain.common.cniargs import parse_cni_args
from cnichain.common.errors import plugin_error
from cnichain.common.record import FrozenRecord
from cnichain.common.skel import NETCONF
from cnichain.common.types import DNS

TYPE_CHECKING = False
if TYPE_CHECKING:  # annotations only: typing and dataclasses cost ~10 ms per exec together
    from typing import Any, Optional

DEFAULT_BRIDGE = "cni0"
_MAC_RE = re.compile(r"^[0-9a-fA-F]{2}([:-])[0-9a-fA-F]{2}(\1[0-9a-fA-F]{2}){4}$")
_PREFIX = "failed to load netconf: "

VLAN_TRUNK = gojson.Struct("main.VlanTrunk", [
    gojson.Field("minID", gojson.Ptr(gojson.INT), "MinID"),
    gojson.Field("maxID", gojson.Ptr(gojson.INT), "MaxID"),
    gojson.Field("id", gojson.Ptr(gojson.INT), "ID"),
])
BRIDGE_ARGS = gojson.Struct("main.BridgeArgs", [gojson.Field("mac", gojson.STRING, "Mac")])
# The reference's NetConf with libcni's types.NetConf embedded (its fields are promoted, so type
# errors name NetConf for them too).  go-cni would send the mac capability as {"mac": ...}; Go
# field casing (IsGW's json name is still "isGateway", matched case-insensitively) is accepted.
SCHEMA = gojson.Struct("main.NetConf", [
    *NETCONF.fields,
    gojson.Field("bridge", gojson.STRING, "BrName"),
    gojson.Field("isGateway", gojson.BOOL, "IsGW"),
    gojson.Field("isDefaultGateway", gojson.BOOL, "IsDefaultGW"),
    ("forceAddress", gojson.BOOL),
    gojson.Field("ipMasq", gojson.BOOL, "IPMasq"),
    gojson.Field("ipMasqBackend", gojson.Ptr(gojson.STRING), "IPMasqBackend"),
    gojson.Field("mtu", gojson.INT, "MTU"),
    ("hairpinMode", gojson.BOOL),
    ("promiscMode", gojson.BOOL),
    ("vlan", gojson.INT),
    ("vlanTrunk", gojson.List(gojson.Ptr(VLAN_TRUNK))),
    ("preserveDefaultVlan", gojson.BOOL),
    gojson.Field("macspoofchk", gojson.BOOL, "MacSpoofChk"),
    gojson.Field("enabledad", gojson.BOOL, "EnableDad"),
    ("disableContainerInterface", gojson.BOOL),
    ("portIsolation", gojson.BOOL),
    ("args", gojson.Struct(
        'struct { Cni main.BridgeArgs "json:\\"cni,omitempty\\"" }',
        [gojson.Field("cni", BRIDGE_ARGS, "Cni")],
    )),
    ("runtimeConfig", gojson.Struct(
        'struct { Mac string "json:\\"mac,omitempty\\"" }',
        [gojson.Field("mac", gojson.STRING, "Mac")],
    )),
])
# Decoded bool key -> BridgeConfig attribute.
_BOOLS = {
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
        "ipam_type", "dns", "mac", "ip_masq_backend",
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
    dns: DNS
    mac: str
    ip_masq_backend: str  # as written; nftables is always what is programmed

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
        dns: Optional[DNS] = None,
        mac: str = "",
        ip_masq_backend: str = "",
    ) -> None:
        self._assign(
            network=network,
            cni_version=cni_version,
            bridge=bridge,
            is_gateway=is_gateway,
            is_default_gateway=is_default_gateway,
            force_address=force_address,
            ip_masq=ip_masq,
            hairpin_mode=hairpin_mode,
            promisc_mode=promisc_mode,
            preserve_default_vlan=preserve_default_vlan,
            macspoofchk=macspoofchk,
            enable_dad=enable_dad,
            disable_container_interface=disable_container_interface,
            port_isolation=port_isolation,
            mtu=mtu,
            vlan=vlan,
            vlan_trunk=vlan_trunk,
            ipam_type=ipam_type,
            dns=DNS() if dns is None else dns,
            mac=mac,
            ip_masq_backend=ip_masq_backend,
        )

    @property
    def is_layer3(self) -> bool:
        return bool(self.ipam_type)

    @property
    def needs_vlan_filtering(self) -> bool:
        return bool(self.vlan or self.vlan_trunk)

    @property
    def vlan_gateway(self) -> str:
        """The reference's gateway device for ``vlan`` with ``isGateway``: ``<bridge>.<vlan>``, a
        veth end in the host whose peer is an access port of that VLAN ("" when not used)."""
        return f"{self.bridge}.{self.vlan}" if self.vlan and self.is_gateway else ""


def _fail(msg: str):
    return plugin_error(f"{_PREFIX}{msg}")


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


def _trunk(entries: Optional[list]) -> tuple[int, ...]:
    """Go's ``collectVlanTrunk``: every VID of the decoded ``vlanTrunk`` entries, sorted, once."""
    vids: list[int] = []
    for item in entries or ():
        if item is None:
            continue
        vid, lo, hi = item["id"], item["minID"], item["maxID"]
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


def _mac_from_request(d: dict, cni_args: str) -> str:
    """Container MAC with the reference precedence: CNI_ARGS < args.cni.mac < runtimeConfig.mac."""
    mac = ""
    if cni_args:
        mac = parse_cni_args(cni_args, {"MAC"}).get("MAC", "")
    mac = d["args"]["cni"]["mac"] or mac
    mac = d["runtimeConfig"]["mac"] or mac
    return parse_mac(mac) if mac else ""


def load(conf: dict, cni_args: str = "", *, with_mac: bool = True) -> BridgeConfig:
    """Validate the whole network config (stdin) of a bridge invocation."""
    d = gojson.decode(conf, SCHEMA, _PREFIX)
    values: dict[str, Any] = {attr: d[key] for key, attr in _BOOLS.items()}
    bridge = d["bridge"] or DEFAULT_BRIDGE
    validate_link_name(bridge, "bridge")
    mtu = d["mtu"]
    if mtu < 0 or mtu > 65535:
        raise _fail(f"invalid MTU {mtu}")
    vlan = d["vlan"]
    if vlan < 0 or vlan > 4094:
        raise plugin_error(f"invalid VLAN ID {vlan} (must be between 0 and 4094)")
    trunk = _trunk(d["vlanTrunk"])
    ipam_type = d["ipam"]["type"]
    if values["is_default_gateway"]:
        values["is_gateway"] = True
    if values["disable_container_interface"] and ipam_type:
        raise plugin_error("cannot use IPAM when DisableContainerInterface flag is set")
    return BridgeConfig(
        network=d["name"],
        cni_version=d["cniVersion"] or "0.1.0",
        bridge=bridge,
        mtu=mtu,
        vlan=vlan,
        vlan_trunk=trunk,
        ipam_type=ipam_type,
        dns=DNS.from_decoded(d["dns"]),
        mac=_mac_from_request(d, cni_args) if with_mac else "",
        ip_masq_backend=d["ipMasqBackend"] or "",
        **values,
    )


def add_refusals(cfg: BridgeConfig) -> None:
    """What the reference refuses only when it sets a pod up (cmdAdd), so DEL, CHECK, GC and
    STATUS of such a config still work here too."""
    if cfg.ip_masq and cfg.is_layer3 and cfg.ip_masq_backend not in ("", "iptables", "nftables"):
        raise plugin_error(f'unknown ipmasq backend "{cfg.ip_masq_backend}"')
    if cfg.hairpin_mode and cfg.promisc_mode:
        raise plugin_error("cannot set hairpin mode and promiscuous mode at the same time")
    if cfg.vlan_gateway:
        validate_link_name(cfg.vlan_gateway, "vlan gateway")


def status_needs(conf: Any) -> tuple[str, bool, bool]:
    """STATUS's only inputs: ``(ipam.type, ipMasq, macspoofchk)``, read leniently (a missing or
    mistyped key is "" / off) unlike :func:`load`: STATUS is a node-health call (containerd 2.1+
    turns the node NotReady on its failure), so keys it does not need must never fail it."""
    from cnichain.common.health import conf_str, conf_true

    return conf_str(conf, "ipam", "type"), conf_true(conf, "ipMasq"), conf_true(conf, "macspoofchk")
