"""What our plugins hold in the kernel of a node namespace, read back without any runtime's help.

* portmap: the ``inet cnichain_portmap`` table; each container owns a ``c-<hash>`` chain whose
  comment names ``<network>/<containerID>`` and whose DNAT rules carry their dispatch key;
* bridge masquerade: ``inet cnichain_masquerade``, one rule per pod address with a comment naming
  network, ifname and container ID;
* bandwidth: IFBs named ``bwp`` + 12 hex (alias ``cnichain-bandwidth net=N id=ID`` when ours made
  them), their TBF (egress) and the TBF on the host veth redirecting to them (ingress).

Every read happens with the calling thread inside ``node_netns`` (None: the caller's namespace),
with sockets opened there: libnftables and netlink bind a socket to the namespace it is created in.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any, Optional

from cnichain.common import netns as netns_mod

PORTMAP_TABLE = "inet cnichain_portmap"
MASQ_CHAIN = "inet cnichain_masquerade postrouting"
_DNAT = re.compile(
    r'^(?P<match>.*?)\s*\b(?P<proto>tcp|udp|sctp) dport (?P<port>\d+) dnat (?:ip6? )?to (?P<target>\S+)'
    r'(?: comment "(?P<key>[^"]*)")?$'
)
_STANDARD_MATCH = re.compile(r"\s*(?:meta nfproto ipv[46]|ip6? daddr \S+)$")
_ALIAS = re.compile(r"^cnichain-bandwidth net=(\S+) id=(\S+)$")


@dataclass
class PortMapping:
    network: str
    container_id: str
    protocol: str
    host_port: int
    host_ip: str  # "" = every local address of the family
    family: int
    pod_ip: str
    pod_port: int
    conditions: str = ""
    chain: str = ""


@dataclass
class Masquerade:
    network: str
    container_id: str
    ifname: str
    addresses: list[str] = field(default_factory=list)


@dataclass
class Shaping:
    ifb: str
    network: str = ""  # from the IFB's alias; "" for IFBs the reference plugin made
    container_id: str = ""
    egress: Optional[dict] = None  # TBF on the IFB: rate/burst in bits, limit in bytes
    host_veth: str = ""
    ingress: Optional[dict] = None  # TBF on the host veth


class _in_netns:
    """``netns.entered`` when a path is given, else nothing (the caller's namespace)."""

    def __init__(self, path: Optional[str]) -> None:
        self.inner = netns_mod.entered(path) if path else None

    def __enter__(self) -> None:
        if self.inner is not None:
            self.inner.__enter__()

    def __exit__(self, *exc: object) -> None:
        if self.inner is not None:
            self.inner.__exit__(*exc)


def _nft(node_netns: Optional[str], command: str, as_json: bool) -> Optional[str]:
    """Output of one ``nft list`` command in the node namespace; None when the object is absent."""
    import nftables

    with _in_netns(node_netns):
        handle = nftables.Nftables()  # created here: its netlink socket belongs to this namespace
        handle.set_json_output(as_json)
        rc, out, err = handle.cmd(command)
    if rc != 0:
        if "No such file or directory" in str(err) or "does not exist" in str(err):
            return None
        raise RuntimeError(f"nft {command}: {str(err).strip()}")
    return out or ""


# -- portmap ----------------------------------------------------------------------------------


def parse_portmap_listing(text: str) -> list[PortMapping]:
    """The DNAT rules of every container chain in a text listing of our portmap table."""
    out: list[PortMapping] = []
    chain = ""
    identity = ("", "")
    for raw in text.splitlines():
        line = raw.strip()
        if line.startswith("chain ") and line.endswith("{"):
            chain = line.split()[1]
            identity = ("", "")
            continue
        if not chain.startswith("c-"):
            continue
        if line.startswith('comment "id ') or line.startswith('continue comment "id '):
            text_id = line.split('"')[1]
            parts = text_id.split(" ", 2)
            if len(parts) == 3 and "/" in parts[2]:
                network, _, cid = parts[2].partition("/")
                identity = (network, cid)
            continue
        m = _DNAT.match(line)
        if not m:
            continue
        key = m.group("key") or ""
        host_ip = ""
        family = 6 if " ip6 to " in f" {line} " or m.group("target").startswith("[") else 4
        if key.startswith("ip/"):
            host_ip = key.split("/")[1]
        target = m.group("target")
        addr, _, port = target.rpartition(":")
        conditions = _STANDARD_MATCH.sub("", m.group("match")).strip()
        out.append(PortMapping(
            network=identity[0], container_id=identity[1], protocol=m.group("proto"),
            host_port=int(m.group("port")), host_ip=host_ip, family=family, pod_ip=addr.strip("[]"),
            pod_port=int(port) if port.isdigit() else 0, conditions=conditions, chain=chain,
        ))
    return out


def portmap_mappings(node_netns: Optional[str]) -> list[PortMapping]:
    text = _nft(node_netns, f"list table {PORTMAP_TABLE}", as_json=False)
    return parse_portmap_listing(text) if text else []


# -- bridge masquerade ------------------------------------------------------------------------


def parse_masquerade_listing(objects: list[dict]) -> list[Masquerade]:
    from cnichain.plugins.bridge import rules

    found: dict[tuple[str, str, str], Masquerade] = {}
    for rule in rules.rules_in(objects):
        comment = str(rule.get("comment", ""))
        fields = dict(
            part.strip().split(": ", 1) for part in comment.split(",")[1:] if ": " in part
        )
        network, ifname, cid = fields.get("net", ""), fields.get("if", ""), fields.get("id", "")
        if not (network and cid):
            continue
        entry = found.setdefault((network, cid, ifname), Masquerade(network, cid, ifname))
        entry.addresses.extend(rules.rule_addresses(rule))
    return list(found.values())


def masquerades(node_netns: Optional[str]) -> list[Masquerade]:
    text = _nft(node_netns, f"list chain {MASQ_CHAIN}", as_json=True)
    if not text:
        return []
    return parse_masquerade_listing(list(json.loads(text).get("nftables", [])))


# -- bandwidth --------------------------------------------------------------------------------


def _tick() -> float:
    from cnichain.plugins.bandwidth import plan as tbf

    try:
        with open("/proc/net/psched", "rb") as fh:
            return tbf.tick_in_usec(fh.read().decode("ascii", "replace"))
    except Exception:  # OSError or the plugin's parse error: rates are still worth showing
        return 0.0


def _tbf_view(params: Any, tick: float) -> dict:
    from cnichain.plugins.bandwidth import plan as tbf

    out = {"rate_bits": params.rate * 8, "limit_bytes": params.limit, "buffer_ticks": params.buffer}
    if tick:
        out["burst_bits"] = tbf.burst_bytes(params, tick) * 8
    return out


def shapings(node_netns: Optional[str]) -> tuple[list[Shaping], dict[str, dict]]:
    """Every ``bwp`` IFB in the node namespace with the limits the kernel holds, and the root TBF of
    every veth that has one (ingress-only shaping has no IFB; its veth is named in the result)."""
    from cnichain.common import netlink
    from cnichain.plugins.bandwidth import kernel as tc
    from cnichain.plugins.bandwidth.config import IFB_PREFIX

    tick = _tick()
    out = []
    veth_tbf: dict[str, dict] = {}
    with netlink.session(node_netns or None) as host:
        for msg in host.get_links():
            if msg.get_nested("IFLA_LINKINFO", "IFLA_INFO_KIND") != "veth":
                continue
            vroot = tc.root_tbf(host, int(msg["index"]))
            if vroot is not None and vroot.tbf is not None:
                veth_tbf[str(msg.get_attr("IFLA_IFNAME"))] = _tbf_view(vroot.tbf, tick)
        for link in tc.ifb_links(host):
            if not link.name.startswith(IFB_PREFIX):
                continue
            shaping = Shaping(ifb=link.name)
            m = _ALIAS.match(link.alias)
            if m:
                shaping.network, shaping.container_id = m.group(1), m.group(2)
            root = tc.root_tbf(host, link.index)
            if root is not None and root.tbf is not None:
                shaping.egress = _tbf_view(root.tbf, tick)
            for veth in tc.veths_redirecting_to(host, link.index)[:1]:
                shaping.host_veth = veth.name
                vroot = tc.root_tbf(host, veth.index)
                if vroot is not None and vroot.tbf is not None:
                    shaping.ingress = _tbf_view(vroot.tbf, tick)
            out.append(shaping)
    return out, veth_tbf
