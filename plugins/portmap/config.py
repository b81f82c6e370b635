"""portmap's network configuration and port mappings: parsing and validation only.

Everything here is pure.  Messages follow the reference plugin where it has one (runtimes and
operators grep for them); where the reference silently accepts something that would make the
kernel objects wrong or wider than asked (an unknown protocol, an iptables match handed to an
nftables table) we refuse it with an error that names the key.
"""

from __future__ import annotations

import functools
import ipaddress
import json

from cnichain.common import gojson
from cnichain.common.errors import CniError, plugin_error
from cnichain.common.record import FrozenRecord

TYPE_CHECKING = False
if TYPE_CHECKING:  # annotations only: typing and dataclasses cost ~8 ms per exec together
    from typing import Any, Callable, Optional

    from cnichain.common.types import Result

PROTOCOLS = ("tcp", "udp", "sctp")


class PortMapping(FrozenRecord):
    """One validated ``portMappings`` entry."""

    host_port: int
    container_port: int
    protocol: str  # lower case: tcp, udp or sctp
    host_ip: str = ""  # canonical text, "" when absent

    @property
    def host_family(self) -> int:
        """4 or 6 for a given hostIP, 0 when the mapping applies to both families."""
        if not self.host_ip:
            return 0
        return 6 if ":" in self.host_ip else 4

    @property
    def host_ip_is_any(self) -> bool:
        return self.host_ip in ("0.0.0.0", "::")

    def applies_to(self, family: int) -> bool:
        """The reference's rule: a hostIP of the other family skips the mapping."""
        return self.host_family in (0, family)


class PortmapConfig(FrozenRecord):
    """The validated portmap keys of a network config."""

    snat: bool = True
    masq_all: bool = False
    # libnftables JSON match expressions (see .conditions), each kept JSON-encoded so that the
    # record stays immutable and hashable; conditions() hands out fresh dicts.
    conditions_v4: tuple[str, ...] = ()
    conditions_v6: tuple[str, ...] = ()
    mark_masq_bit: Optional[int] = None
    external_set_mark_chain: str = ""
    mappings: tuple[PortMapping, ...] = ()
    backend: str = ""  # as written ("" when unset); nftables is what is always programmed
    # What a lenient load (every command but ADD) left out, one sentence each, for the log.
    skipped: tuple[str, ...] = ()

    def conditions(self, family: int) -> list[dict]:
        """The family's condition matches (JSON ``match`` objects), to put in front of each of its
        DNAT rules."""
        return [json.loads(m) for m in (self.conditions_v4 if family == 4 else self.conditions_v6)]

    @property
    def ignored_keys(self) -> list[str]:
        """Keys accepted for compatibility that change nothing in our nftables layout."""
        out = []
        if self.mark_masq_bit is not None:
            out.append("markMasqBit")
        if self.external_set_mark_chain:
            out.append("externalSetMarkChain")
        if self.backend == "iptables":
            out.append('backend "iptables"')
        return out


_PREFIX = "failed to parse config: failed to parse network configuration: "

# The reference's PortMapConf and PortMapEntry, as Go decodes them (see common/gojson.py): a
# containerd pod's mappings arrive as {"HostPort": 8080, "ContainerPort": 80, "HostIP": ""}.
PORT_MAPPING = gojson.Struct("main.PortMapEntry", [
    ("hostPort", gojson.INT),
    ("containerPort", gojson.INT),
    ("protocol", gojson.STRING),
    gojson.Field("hostIP", gojson.STRING, "HostIP"),
])
SCHEMA = gojson.Struct("main.PortMapConf", [
    gojson.Field("snat", gojson.Ptr(gojson.BOOL), "SNAT"),
    gojson.Field("conditionsV4", gojson.Ptr(gojson.List(gojson.STRING))),
    gojson.Field("conditionsV6", gojson.Ptr(gojson.List(gojson.STRING))),
    ("masqAll", gojson.BOOL),
    ("markMasqBit", gojson.Ptr(gojson.INT)),
    ("externalSetMarkChain", gojson.Ptr(gojson.STRING)),
    ("backend", gojson.Ptr(gojson.STRING)),
    ("runtimeConfig", gojson.Struct("", [
        ("portMappings", gojson.List(PORT_MAPPING)),
    ])),
])


def _conditions(raw: Optional[list], key: str, backend: str) -> tuple[str, ...]:
    """The condition list as JSON-encoded matches: iptables argv tokens (the reference's default
    backend) translated by :mod:`.ipt_conditions`, nft text parsed by :mod:`.conditions`.

    The backend a config names explicitly must match its conditions' style, as the reference
    requires (same texts); an unset backend takes either style.
    """
    tokens = tuple(c.strip() for c in raw or () if c.strip())
    if not tokens:
        return ()
    from .ipt_conditions import is_iptables_style  # only for configs that have conditions

    family = 4 if key == "conditionsV4" else 6
    if is_iptables_style(tokens):
        if backend == "nftables":
            raise plugin_error(
                "failed to parse config: nftables backend was requested but configuration contains "
                f"iptables-specific options [{key}]"
            )
        from .conditions import Refused
        from .ipt_conditions import translate

        try:
            matches: tuple[dict, ...] = tuple(translate(tokens, family))
        except Refused as exc:
            raise plugin_error(
                f"failed to parse config: {key}: iptables condition outside the supported subset: {exc}",
                f"{list(raw or ())}; supported: [!] -s/-d, -i/-o, -p, --dport/--sport, -m comment --comment",
            ) from None
        return tuple(json.dumps(m, sort_keys=True) for m in matches)
    if backend == "iptables":
        raise plugin_error(
            "failed to parse config: iptables backend was requested but configuration contains "
            f"nftables-specific options [{key}]"
        )
    from .conditions import validated

    return tuple(json.dumps(m, sort_keys=True) for m in validated(tokens, key))


def mapping_from(entry: dict) -> PortMapping:
    """Validate one decoded ``portMappings`` entry (a dict from :data:`PORT_MAPPING`)."""
    container_port = entry["containerPort"]
    host_port = entry["hostPort"]
    if container_port <= 0 or container_port > 65535:
        raise plugin_error(f"failed to parse config: Invalid container port number: {container_port}")
    if host_port <= 0 or host_port > 65535:
        raise plugin_error(f"failed to parse config: Invalid host port number: {host_port}")
    proto = entry["protocol"] or "tcp"
    if proto.lower() not in PROTOCOLS:
        raise plugin_error(
            f"failed to parse config: unsupported protocol {proto!r} in portMappings (tcp, udp or sctp)"
        )
    host_ip = entry["hostIP"]
    if host_ip:
        try:
            addr = gojson.parse_ip(host_ip)
        except CniError:
            raise plugin_error(f"failed to parse config: invalid hostIP {host_ip!r} in portMappings") from None
        host_ip = str(addr)
    return PortMapping(host_port, container_port, proto.lower(), host_ip)


def parse_mapping(raw: Any) -> PortMapping:
    """One raw ``portMappings`` entry, decoded with Go's rules and validated."""
    entry = gojson.decode({"runtimeConfig": {"portMappings": [raw]}}, SCHEMA, _PREFIX)
    return mapping_from(entry["runtimeConfig"]["portMappings"][0])


def load(conf: dict, *, strict: bool = True) -> PortmapConfig:
    """Validate the portmap keys of a network config (``runtimeConfig`` included).

    ``strict`` is for ADD.  Every other command loads leniently: what only ADD needs and ADD
    would refuse (conditions outside the subset or of the other backend's style, a mapping with
    an unusable protocol or hostIP) is left out and named in ``skipped``, so that DEL, CHECK, GC
    and STATUS of a config the reference accepts never fail.  JSON type errors and the
    reference's own refusals (backend name, mark bit, port numbers) fail every command, as they
    do there.
    """
    d = gojson.decode(conf, SCHEMA, _PREFIX)
    backend = d["backend"] or ""
    if backend not in ("", "iptables", "nftables"):
        raise plugin_error(f'failed to parse config: unrecognized backend "{backend}"')
    mark_bit = d["markMasqBit"]
    if mark_bit is not None and not 0 <= mark_bit <= 31:
        raise plugin_error("failed to parse config: MasqMarkBit must be between 0 and 31")
    ext = d["externalSetMarkChain"] or ""
    if ext and mark_bit is not None:
        raise plugin_error("failed to parse config: Cannot specify externalSetMarkChain and markMasqBit")
    skipped: list[str] = []

    def lenient(what: str, parse: Callable[[], Any], empty: Any) -> Any:
        if strict:
            return parse()
        try:
            return parse()
        except CniError as exc:
            skipped.append(f"{what} ({exc.msg})")
            return empty

    raw_mappings = d["runtimeConfig"]["portMappings"] or ()
    for m in raw_mappings:  # the reference's own check, at every command
        if m["containerPort"] <= 0:
            raise plugin_error(f"failed to parse config: Invalid container port number: {m['containerPort']}")
        if m["hostPort"] <= 0:
            raise plugin_error(f"failed to parse config: Invalid host port number: {m['hostPort']}")
    mappings: list[Optional[PortMapping]] = []
    for i, m in enumerate(raw_mappings):
        mappings.append(lenient(f"portMappings[{i}]", functools.partial(mapping_from, m), None))
    snat = d["snat"]
    return PortmapConfig(
        snat=True if snat is None else snat,
        masq_all=d["masqAll"],
        conditions_v4=lenient("conditionsV4", lambda: _conditions(d["conditionsV4"], "conditionsV4", backend), ()),
        conditions_v6=lenient("conditionsV6", lambda: _conditions(d["conditionsV6"], "conditionsV6", backend), ()),
        mark_masq_bit=mark_bit,
        external_set_mark_chain=ext,
        mappings=tuple(m for m in mappings if m is not None),
        backend=backend,
        skipped=tuple(skipped),
    )


def container_ips(prev: Result, ifname: str) -> dict[int, str]:
    """The first IPv4 and first IPv6 address of the pod, picked exactly as the reference does.

    An address whose ``interface`` index names another interface, or a host-side one (no
    sandbox), is skipped; an address without an index is taken.
    """
    out: dict[int, str] = {}
    for ip in prev.ips:
        if ip.interface is not None:
            if not 0 <= ip.interface < len(prev.interfaces):
                continue
            iface = prev.interfaces[ip.interface]
            if iface.name != ifname or not iface.sandbox:
                continue
        addr = ip.address.split("/", 1)[0]
        try:
            parsed = ipaddress.ip_address(addr)
        except ValueError:
            continue
        out.setdefault(parsed.version, str(parsed))
    return out
