"""Our table read back: the port mappings each container holds, in its chains or in the maps,
from the libnftables JSON listing :func:`.kernel.listed_mappings` takes.

Every ``c-<owner>`` chain starts with its identity rule (``id <digest> <network>/<containerID>``,
see :mod:`.names`) and holds one DNAT rule per mapping and family, in the form :func:`.plan.plan_owner`
builds: the config's conditions, the dispatch match (``meta nfproto`` or ``ip[6] daddr``), the
``dport`` match and the ``dnat``, with the dispatch key as comment.  In the map layout a mapping is
an ownership element (key -> owner), its target element (key -> pod address . port) and its
owner's OWNERS element, whose comment is the identity.  Pure: no kernel access; a node
view (``cnichain inspect``) reads through here so it sees exactly what the plugin wrote.
"""

from __future__ import annotations

from cnichain.common.record import Record

from .conditions import render
from .names import DNAT_CHAIN_PREFIX, ID_PREFIX, key_port

TYPE_CHECKING = False
if TYPE_CHECKING:  # annotations only: typing costs milliseconds per exec
    from typing import Any, Optional


class HeldMapping(Record):
    """One DNAT rule of a container chain, as the kernel holds it."""

    network: str  # "" when the chain carries no identity rule
    container_id: str
    protocol: str
    host_port: int
    host_ip: str  # "" = every local address of the family
    family: int
    pod_ip: str
    pod_port: int
    conditions: str = ""  # the config's extra matches in nft syntax, "" for none
    chain: str = ""


def identity_of(comment: str) -> Optional[tuple[str, str]]:
    """(network, container ID) named by an identity comment; None for any other comment."""
    if not comment.startswith(ID_PREFIX):
        return None
    parts = comment[len(ID_PREFIX):].split(" ", 1)
    if len(parts) != 2 or "/" not in parts[1]:
        return None
    network, _, container_id = parts[1].partition("/")
    return network, container_id


def _mapping(rule: dict, chain: str, identity: tuple[str, str]) -> Optional[HeldMapping]:
    """The mapping one DNAT rule serves, or None for any other rule (markers, foreign rules)."""
    expr: list[Any] = rule.get("expr") or []
    if len(expr) < 3 or not isinstance(expr[-1], dict) or not isinstance(expr[-1].get("dnat"), dict):
        return None
    dnat = expr[-1]["dnat"]
    dport = expr[-2].get("match") if isinstance(expr[-2], dict) else None
    if not isinstance(dport, dict) or not isinstance(dport.get("right"), int):
        return None
    left = dport.get("left", {}).get("payload", {})
    if left.get("field") != "dport":
        return None
    key = str(rule.get("comment", ""))
    host_ip = key.split("/")[1] if key.startswith("ip/") else ""
    port = dnat.get("port")
    return HeldMapping(
        network=identity[0], container_id=identity[1], protocol=str(left.get("protocol", "")),
        host_port=int(dport["right"]), host_ip=host_ip, family=6 if dnat.get("family") == "ip6" else 4,
        pod_ip=str(dnat.get("addr", "")), pod_port=port if isinstance(port, int) else 0,
        conditions=render(expr[:-3]), chain=chain,
    )


def mappings_in(objects: list[dict]) -> list[HeldMapping]:
    """The DNAT rules of every container chain in a listing of our table, in listing order."""
    rules: dict[str, list[dict]] = {}
    for obj in objects:
        rule = obj.get("rule") if isinstance(obj, dict) else None
        if isinstance(rule, dict) and str(rule.get("chain", "")).startswith(DNAT_CHAIN_PREFIX):
            rules.setdefault(str(rule["chain"]), []).append(rule)
    out: list[HeldMapping] = []
    for chain, chain_rules in rules.items():
        identity = ("", "")
        for rule in chain_rules:
            found = identity_of(str(rule.get("comment", "")))
            if found is not None:
                identity = found
                continue
            held = _mapping(rule, chain, identity)
            if held is not None:
                out.append(held)
    return out + _in_maps(objects)


def _in_maps(objects: list[dict]) -> list[HeldMapping]:
    """The DNAT keys of the map layout: an ownership element, its target, its owner's identity."""
    from .rebuild import Snapshot

    snap = Snapshot.from_json(objects)
    out: list[HeldMapping] = []
    for key, owner in snap.own.items():
        served, target = key_port(key), snap.to.get(key)
        if served is None or target is None:
            continue  # a masquerade key, or a key without its target
        network, container_id = identity_of(snap.identities.get(owner, "")) or ("", "")
        family, protocol, port = served
        out.append(HeldMapping(
            network=network, container_id=container_id, protocol=protocol, host_port=port,
            host_ip=key.split("/")[1] if key.startswith("ip/") else "", family=family,
            pod_ip=target[0], pod_port=target[1],
        ))
    return out
