"""Pure builders for the bridge plugin's nftables objects (libnftables JSON), and their ownership tags.

Two tables of our own, never shared with other tools:

* ``inet cnichain_masquerade``, for ``ipMasq``, in maps -- no rule per pod, so ADD and DEL cost
  what they change at any number of pods (a rule per pod meant listing the chain for every change:
  2.7 ms of CPU for an ADD and DEL at 0 pods, 16 ms at 110, 120 ms at 1,000)::

      map pod_owners4   <pod address> : <owner>          comment "<owner tag>, net: .., if: .., id: .."
      map pod_nets4     <pod address> : jump net-<h>     (pod_owners6 / pod_nets6 for IPv6)
      chain pods        nat postrouting srcnat:  ip saddr vmap @pod_nets4; ip6 saddr vmap @pod_nets6
      chain net-<h>     ip daddr != <pod subnet> ip daddr != 224.0.0.0/4 masquerade   (ff00::/8)

  ``<owner>`` is the attachment's owner tag read as 128 bits (an IPv6 address): ADD claims each
  address in one transaction of element adds, which the kernel refuses when another attachment
  holds it; DEL is the same claim followed by the deletes, so it never removes another
  attachment's element, whatever address it reuses.  ``<h>`` names the subnet, so every pod of
  a subnet shares its chain.  The previous release's layout -- base chain ``postrouting``, one
  rule per pod address, ``ip saddr <pod> ip daddr != <pod subnet> ip daddr != 224.0.0.0/4
  masquerade`` with the owner comment -- is still read and removed, never written.
* ``bridge cnichain_macspoof``, base chain ``prerouting`` (filter, priority -300): one rule per pod,
  ``iifname <host veth> ether saddr != <pod MAC> drop``.

Every rule or owner element carries a comment that starts with an ownership tag derived from the
network name and the (containerID, ifname) pair alone, so DEL and GC find a pod's state without its
netns, its addresses or its prevResult.  The tag layout follows the reference nftables backend: 16
hex of SHA-512(network), ``-``, 16 hex of SHA-512("ifname:containerID"), then readable fields, cut
at 128 characters.
"""

from __future__ import annotations

import hashlib
import ipaddress

TYPE_CHECKING = False
if TYPE_CHECKING:  # annotations only: typing costs milliseconds on every exec
    from typing import Iterable, Optional

MASQ_TABLE = "cnichain_masquerade"
MASQ_CHAIN = "postrouting"  # the previous release's chain of per-pod rules: read and emptied, never written
PODS_CHAIN = "pods"
POD_OWNERS = {4: "pod_owners4", 6: "pod_owners6"}
POD_NETS = {4: "pod_nets4", 6: "pod_nets6"}
NET_CHAIN_PREFIX = "net-"
_ADDR_TYPE = {4: "ipv4_addr", 6: "ipv6_addr"}
_SADDR = {4: "ip", 6: "ip6"}
SPOOF_TABLE = "cnichain_macspoof"
SPOOF_CHAIN = "prerouting"
COMMENT_MAX = 128
OWNER_TAG_LEN = 33  # two 16-hex-digit hashes and a dash: owner_tag()
_MULTICAST = {4: ("224.0.0.0", 4), 6: ("ff00::", 8)}


def _h16(text: str) -> str:
    return hashlib.sha512(text.encode()).hexdigest()[:16]


def network_tag(network: str) -> str:
    return _h16(network)


def owner_tag(network: str, container_id: str, ifname: str) -> str:
    """The comment prefix that identifies one attachment's rules (33 characters)."""
    return f"{_h16(network)}-{_h16(f'{ifname}:{container_id}')}"


def tag_of(rule_comment: str) -> str:
    """The owner tag (:func:`owner_tag`) a rule's comment starts with; "" for a comment too short."""
    tag = rule_comment[:OWNER_TAG_LEN]
    return tag if len(tag) == OWNER_TAG_LEN else ""


def comment(network: str, container_id: str, ifname: str) -> str:
    text = f"{owner_tag(network, container_id, ifname)}, net: {network}, if: {ifname}, id: {container_id}"
    return text[:COMMENT_MAX]


def attachment_of(rule_comment: str) -> Optional[tuple[str, str, str]]:
    """(network, ifname, container ID) that :func:`comment` wrote into ``rule_comment``; None when
    it names no network or container (not one of ours, or cut short by ``COMMENT_MAX``)."""
    fields = dict(part.strip().split(": ", 1) for part in rule_comment.split(",")[1:] if ": " in part)
    network, ifname, container_id = fields.get("net", ""), fields.get("if", ""), fields.get("id", "")
    return (network, ifname, container_id) if network and container_id else None


# -- masquerade in maps ----------------------------------------------------------------------------

def owner_addr(network: str, container_id: str, ifname: str) -> str:
    """The attachment's owner tag as the 128-bit value its owner elements hold (an IPv6 address)."""
    return str(ipaddress.IPv6Address(int(owner_tag(network, container_id, ifname).replace("-", ""), 16)))


def tag_of_owner(value: str) -> str:
    """The owner tag an owner element's value holds (inverse of :func:`owner_addr`); "" when it is
    not an IPv6 address."""
    try:
        digits = f"{int(ipaddress.IPv6Address(value)):032x}"
    except ValueError:
        return ""
    return f"{digits[:16]}-{digits[16:]}"


def _family(address: str) -> int:
    return ipaddress.ip_interface(address).version


def address_of(address: str) -> str:
    """The host address of a result's CIDR (``10.1.0.5/24`` -> ``10.1.0.5``), as maps key it."""
    return str(ipaddress.ip_interface(address).ip)


def net_chain(address: str) -> str:
    """The chain of the subnet ``address`` (CIDR with the host part, as in a result) lies in."""
    return NET_CHAIN_PREFIX + _h16(str(ipaddress.ip_interface(address).network))


def _obj(**fields: object) -> dict:
    return {"family": "inet", "table": MASQ_TABLE, **fields}


def _net_rule(address: str) -> list[dict]:
    """``net-<h>``: masquerade what leaves the subnet for anything but multicast (idempotent:
    the chain is flushed and its one rule written again)."""
    iface = ipaddress.ip_interface(address)
    proto = _SADDR[iface.version]
    mc_addr, mc_len = _MULTICAST[iface.version]
    chain = net_chain(address)

    def daddr_not(addr: str, length: int) -> dict:
        return {"match": {"op": "!=", "left": {"payload": {"protocol": proto, "field": "daddr"}},
                          "right": {"prefix": {"addr": addr, "len": length}}}}

    expr = [daddr_not(str(iface.network.network_address), iface.network.prefixlen), daddr_not(mc_addr, mc_len),
            {"masquerade": None}]
    return [{"add": {"chain": _obj(name=chain)}}, {"flush": {"chain": _obj(name=chain)}},
            {"add": {"rule": _obj(chain=chain, expr=expr)}}]


def masq_skeleton(addresses: Iterable[str]) -> list[dict]:
    """The table, its maps and ``pods`` chain, and the chains of ``addresses``' subnets, every one
    written whole again (idempotent, and the same size at any number of pods): what goes in front
    of a claim that met a missing object, and of the reconciler's repair."""
    out: list[dict] = [{"add": {"table": {"family": "inet", "name": MASQ_TABLE}}}]
    for family in (4, 6):
        out.append({"add": {"map": _obj(name=POD_OWNERS[family], type=_ADDR_TYPE[family], map="ipv6_addr")}})
        out.append({"add": {"map": _obj(name=POD_NETS[family], type=_ADDR_TYPE[family], map="verdict")}})
    out.append({"add": {"chain": _obj(name=PODS_CHAIN, type="nat", hook="postrouting", prio=100, policy="accept")}})
    out.append({"flush": {"chain": _obj(name=PODS_CHAIN)}})
    for family in (4, 6):
        saddr = {"payload": {"protocol": _SADDR[family], "field": "saddr"}}
        out.append({"add": {"rule": _obj(chain=PODS_CHAIN, expr=[{"vmap": {"key": saddr, "data": f"@{POD_NETS[family]}"}}])}})
    chains = {net_chain(a): a for a in addresses}
    for address in chains.values():
        out += _net_rule(address)
    return out


def _owner_element(address: str, owner: str, verb: str, tag_comment: str = "") -> dict:
    key: object = address_of(address)
    if tag_comment:
        key = {"elem": {"val": key, "comment": tag_comment}}
    item = [key, owner] if verb == "add" else key
    return {verb: {"element": _obj(name=POD_OWNERS[_family(address)], elem=[item])}}


def _net_element(address: str, verb: str) -> dict:
    item = [address_of(address), {"jump": {"target": net_chain(address)}}] if verb == "add" else address_of(address)
    return {verb: {"element": _obj(name=POD_NETS[_family(address)], elem=[item])}}


def masq_claim(addresses: Iterable[str], owner: str, tag_comment: str) -> list[dict]:
    """ADD: each address's owner and subnet chain, refused (EEXIST) when one is held by another
    attachment or points elsewhere, and (ENOENT) when the table, a map or the chain is missing."""
    out: list[dict] = []
    for address in addresses:
        out += [_owner_element(address, owner, "add", tag_comment), _net_element(address, "add")]
    return out


def masq_release(addresses: Iterable[str], owner: str) -> list[dict]:
    """DEL: the claim, then the deletes -- it goes through only when every address is this
    attachment's, and a repeated DEL adds and deletes within the one transaction."""
    out: list[dict] = []
    for address in addresses:
        out += [_owner_element(address, owner, "add"), _owner_element(address, owner, "delete"),
                _net_element(address, "add"), _net_element(address, "delete")]
    return out


def masq_drop(held: dict[str, tuple[str, str]], addresses: Iterable[str]) -> list[dict]:
    """Deletes of what ``held`` (address -> (owner, net chain) as listed) has for ``addresses``."""
    out: list[dict] = []
    for address in addresses:
        owner, chain = held.get(address_of(address), ("", ""))
        if owner:
            out.append(_owner_element(address, owner, "delete"))
        if chain:
            out.append(_net_element(address, "delete"))
    return out


def held_in(listing: Optional[list[dict]]) -> dict[str, tuple[str, str, str]]:
    """Address -> (owner value, owner comment, net chain) from a listing holding the owner and net
    maps (``list map`` answers, or the table's); a net element nobody owns (half of an interrupted
    repair) has an empty owner."""
    chains = {address: str(((value or {}).get("jump") or {}).get("target", "")) if isinstance(value, dict) else ""
              for address, _comment, value in _elements(listing, POD_NETS.values())}
    out = {address: (str(value), comment, chains.pop(address, ""))
           for address, comment, value in _elements(listing, POD_OWNERS.values())}
    out.update((address, ("", "", chain)) for address, chain in chains.items())
    return out


def dispatched_families(listing: Optional[list[dict]]) -> set[int]:
    """The families whose ``vmap @pod_nets<f>`` rule the listing's ``pods`` chain holds."""
    wanted = {f"@{name}": family for family, name in POD_NETS.items()}
    found: set[int] = set()
    for rule in rules_in(listing, PODS_CHAIN):
        for expr in rule.get("expr") or []:
            data = ((expr.get("vmap") or {}).get("data") if isinstance(expr, dict) else None)
            if data in wanted:
                found.add(wanted[data])
    return found


def _elements(listing: Optional[list[dict]], maps: Iterable[str]) -> list[tuple[str, str, object]]:
    """(address, element comment, value) of every element of the named ``maps`` in a listing."""
    names = set(maps)
    out: list[tuple[str, str, object]] = []
    for item in listing or []:
        body = item.get("map") if isinstance(item, dict) else None
        if not body or body.get("name") not in names:
            continue
        for elem in body.get("elem") or []:
            if not isinstance(elem, list) or len(elem) != 2:
                continue
            key, comment = elem[0], ""
            if isinstance(key, dict):
                inner = key.get("elem") or {}
                key, comment = inner.get("val", ""), str(inner.get("comment", ""))
            try:
                out.append((str(ipaddress.ip_address(str(key))), comment, elem[1]))
            except ValueError:
                continue
    return out


# -- MAC spoof check -------------------------------------------------------------------------------

def spoof_table_and_chain() -> list[dict]:
    return [
        {"add": {"table": {"family": "bridge", "name": SPOOF_TABLE}}},
        {
            "add": {
                "chain": {
                    "family": "bridge",
                    "table": SPOOF_TABLE,
                    "name": SPOOF_CHAIN,
                    "type": "filter",
                    "hook": "prerouting",
                    "prio": -300,
                    "policy": "accept",
                }
            }
        },
    ]


def spoof_rule(host_veth: str, mac: str, tag_comment: str) -> dict:
    return {
        "add": {
            "rule": {
                "family": "bridge",
                "table": SPOOF_TABLE,
                "chain": SPOOF_CHAIN,
                "comment": tag_comment,
                "expr": [
                    {"match": {"op": "==", "left": {"meta": {"key": "iifname"}}, "right": host_veth}},
                    {
                        "match": {
                            "op": "!=",
                            "left": {"payload": {"protocol": "ether", "field": "saddr"}},
                            "right": mac,
                        }
                    },
                    {"drop": None},
                ],
            }
        }
    }


def spoof_guard(rule: dict) -> tuple[str, str]:
    """``(iifname, MAC)`` a spoof-check rule guards (either empty when it does not say)."""
    veth = mac = ""
    for expr in rule.get("expr") or []:
        match = expr.get("match") if isinstance(expr, dict) else None
        if not isinstance(match, dict) or not isinstance(left := match.get("left"), dict):
            continue
        if (left.get("meta") or {}).get("key") == "iifname" and match.get("op") == "==":
            veth = str(match.get("right", ""))
        elif (left.get("payload") or {}).get("field") == "saddr" and match.get("op") == "!=":
            mac = str(match.get("right", "")).lower()
    return veth, mac


def spoof_add(host_veth: str, mac: str, tag_comment: str, stale_handles: Iterable[int]) -> list[dict]:
    cmds = spoof_table_and_chain()
    cmds += delete_rules("bridge", SPOOF_TABLE, SPOOF_CHAIN, stale_handles)
    cmds.append(spoof_rule(host_veth, mac, tag_comment))
    return cmds


# -- listing and deleting --------------------------------------------------------------------------

def delete_rules(family: str, table: str, chain: str, handles: Iterable[int]) -> list[dict]:
    return [
        {"delete": {"rule": {"family": family, "table": table, "chain": chain, "handle": h}}}
        for h in handles
    ]


def rules_in(listing: Optional[list[dict]], chain: Optional[str] = None) -> list[dict]:
    """The ``rule`` objects of a ``list chain`` answer (None = table/chain missing), or those of
    ``chain`` in a table's listing."""
    return [item["rule"] for item in listing or [] if isinstance(item, dict) and "rule" in item
            and (chain is None or item["rule"].get("chain") == chain)]


def owned_handles(listing: Optional[list[dict]], tag: str) -> list[int]:
    """Handles of the rules whose comment starts with ``tag`` (one attachment's rules)."""
    return [r["handle"] for r in rules_in(listing) if str(r.get("comment", "")).startswith(tag)]


def rule_addresses(rule: dict) -> list[str]:
    """The ``saddr`` a masquerade rule matches (for CHECK)."""
    out = []
    for expr in rule.get("expr") or []:
        match = expr.get("match") if isinstance(expr, dict) else None
        if not match or match.get("op") != "==":
            continue
        left = match.get("left") or {}
        if isinstance(left, dict) and (left.get("payload") or {}).get("field") == "saddr":
            out.append(str(match.get("right")))
    return out


def stale_for_gc(listing: Optional[list[dict]], network: str, keep: set[str]) -> list[int]:
    """Handles of this network's rules whose owner tag is not in ``keep``."""
    prefix = network_tag(network) + "-"
    out = []
    for r in rules_in(listing):
        text = str(r.get("comment", ""))
        if text.startswith(prefix) and text[:33] not in keep:
            out.append(r["handle"])
    return out
