"""Pure builders for the bridge plugin's nftables rules (libnftables JSON), and their ownership tags.

Two tables of our own, never shared with other tools:

* ``inet cnichain_masquerade``, base chain ``postrouting`` (nat, srcnat): one rule per pod address,
  ``ip saddr <pod> ip daddr != <pod subnet> ip daddr != 224.0.0.0/4 masquerade`` (``ff00::/8`` for
  IPv6).  Multicast is excluded in the rule itself, so no shared rule has to be kept in order.
* ``bridge cnichain_macspoof``, base chain ``prerouting`` (filter, priority -300): one rule per pod,
  ``iifname <host veth> ether saddr != <pod MAC> drop``.

Every rule carries a comment that starts with an ownership tag derived from the network name and the
(containerID, ifname) pair alone, so DEL and GC find a pod's rules without its netns, its addresses or
its prevResult.  The tag layout follows the reference nftables backend: 16 hex of SHA-512(network),
``-``, 16 hex of SHA-512("ifname:containerID"), then readable fields, cut at 128 characters.
"""

from __future__ import annotations

import hashlib
import ipaddress

TYPE_CHECKING = False
if TYPE_CHECKING:  # annotations only: typing costs milliseconds on every exec
    from typing import Iterable, Optional

MASQ_TABLE = "cnichain_masquerade"
MASQ_CHAIN = "postrouting"
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


# -- masquerade ------------------------------------------------------------------------------------

def masq_table_and_chain() -> list[dict]:
    return [
        {"add": {"table": {"family": "inet", "name": MASQ_TABLE}}},
        {
            "add": {
                "chain": {
                    "family": "inet",
                    "table": MASQ_TABLE,
                    "name": MASQ_CHAIN,
                    "type": "nat",
                    "hook": "postrouting",
                    "prio": 100,
                    "policy": "accept",
                }
            }
        },
    ]


def masq_rule(address: str, tag_comment: str) -> dict:
    """The masquerade rule for one pod address (CIDR with the host part, as in a result)."""
    iface = ipaddress.ip_interface(address)
    proto = "ip" if iface.version == 4 else "ip6"
    net = iface.network
    mc_addr, mc_len = _MULTICAST[iface.version]

    def daddr_not(addr: str, length: int) -> dict:
        return {
            "match": {
                "op": "!=",
                "left": {"payload": {"protocol": proto, "field": "daddr"}},
                "right": {"prefix": {"addr": addr, "len": length}},
            }
        }

    return {
        "add": {
            "rule": {
                "family": "inet",
                "table": MASQ_TABLE,
                "chain": MASQ_CHAIN,
                "comment": tag_comment,
                "expr": [
                    {
                        "match": {
                            "op": "==",
                            "left": {"payload": {"protocol": proto, "field": "saddr"}},
                            "right": str(iface.ip),
                        }
                    },
                    daddr_not(str(net.network_address), net.prefixlen),
                    daddr_not(mc_addr, mc_len),
                    {"masquerade": None},
                ],
            }
        }
    }


def masq_add(addresses: Iterable[str], tag_comment: str, stale_handles: Iterable[int]) -> list[dict]:
    """One transaction: ensure table and chain, drop this owner's stale rules, add the new ones."""
    cmds = masq_table_and_chain()
    cmds += delete_rules("inet", MASQ_TABLE, MASQ_CHAIN, stale_handles)
    cmds += [masq_rule(a, tag_comment) for a in addresses]
    return cmds


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


def rules_in(listing: Optional[list[dict]]) -> list[dict]:
    """The ``rule`` objects of a ``list chain`` answer (None = table/chain missing)."""
    return [item["rule"] for item in listing or [] if isinstance(item, dict) and "rule" in item]


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
