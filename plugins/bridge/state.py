"""bridge's reconciler face: only its nftables rules, read back, repaired and collected.

bridge keeps two kinds of rule per attachment, each tagged with the attachment's owner tag
(network, ifname, container): ``ipMasq``'s masquerade of the pod's addresses and ``macspoofchk``'s
MAC spoof check of (host veth, container MAC).  The rest of its state is the pod's own veth and
addresses, which the reconciler does not re-create.

* check: what the cached config and result call for, against one listing of the masquerade maps
  (and the previous release's chain) and of the spoof-check chain (the survey); repaired by
  ``add_masquerade`` and ``add_spoof_check`` with the values of the cached result, each bridge's
  own transaction (its table, maps and chains created if gone);
* node view: :func:`masquerades` reads the masquerade state back, one entry per attachment;
* leftovers: ``remove_masquerade`` and ``remove_spoof_check`` for exactly that attachment.
"""

from __future__ import annotations

from contextlib import ExitStack
from dataclasses import dataclass, field
from typing import Any, Optional

from cnichain.common.plugin_state import NFT, Leftovers, PluginState, Repair
from cnichain.common.skel import Request


@dataclass
class Masquerade:
    network: str
    container_id: str
    ifname: str
    addresses: list[str] = field(default_factory=list)


def _addresses(req: Request) -> list[str]:
    prev = req.prev_result
    return [ip.address for ip in prev.ips] if prev is not None else []


def wants(req: Request) -> tuple[list[str], Optional[tuple[str, str]]]:
    """What bridge installed in nftables for this attachment: the addresses its ``ipMasq`` rules
    masquerade, and the ``(host veth, container MAC)`` of its ``macspoofchk`` rule (None: no
    spoof check, or the cached result does not say which veth and MAC)."""
    from cnichain.plugins.bridge.config import load

    cfg = load(req.conf, req.args, with_mac=False)
    masq = _addresses(req) if cfg.ip_masq and cfg.is_layer3 else []
    spoof = None
    prev = req.prev_result
    if cfg.macspoofchk and prev is not None:
        # bridge reports the bridge, the host veth, then the pod's interface; later plugins
        # (bandwidth's IFB) and bridge's VLAN gateway device come after the pod's.
        host = ""
        for iface in prev.interfaces:
            if iface.sandbox and iface.name == req.ifname:
                if host and iface.mac:
                    spoof = (host, iface.mac.lower())
                break
            if not iface.sandbox and iface.name != cfg.bridge:
                host = iface.name
    return masq, spoof


def applies(req: Request) -> bool:
    masq, spoof = wants(req)
    return bool(masq) or spoof is not None


def _tags(masq_holdings: Optional[list[tuple[str, str, str]]], spoof_listing: Optional[list[dict]]
          ) -> tuple[dict[str, set[str]], dict[str, set[tuple[str, str]]]]:
    """Per owner tag: the addresses masqueraded, and the (veth, MAC) pairs spoof-checked."""
    from cnichain.plugins.bridge import rules

    masq: dict[str, set[str]] = {}
    for tag, _comment, address in masq_holdings or []:
        masq.setdefault(tag, set()).add(address)
    spoof: dict[str, set[tuple[str, str]]] = {}
    for rule in rules.rules_in(spoof_listing):
        spoof.setdefault(rules.tag_of(str(rule.get("comment", ""))), set()).add(rules.spoof_guard(rule))
    return masq, spoof


def _survey(_stack: ExitStack) -> Any:
    from cnichain.plugins.bridge import firewall

    return _tags(firewall.masquerade_holdings(), firewall.spoof_listing())


def missing(req: Request, masq_tags: dict[str, set[str]], spoof_tags: dict[str, set[tuple[str, str]]]
            ) -> Optional[str]:
    from cnichain.plugins.bridge import rules

    tag = rules.owner_tag(req.network_name, req.container_id, req.ifname)
    masq, spoof = wants(req)
    out = []
    lost = sorted({a.split("/")[0] for a in masq} - masq_tags.get(tag, set()))
    if lost:
        out.append(f"masquerade rules missing for {', '.join(lost)}")
    if spoof is not None and spoof not in spoof_tags.get(tag, set()):
        out.append(f"MAC spoof check of {spoof[1]} on {spoof[0]} missing")
    return "; ".join(out) or None


def _intact(tags: Any, req: Request) -> bool:
    return missing(req, *tags) is None


def _check(req: Request) -> Optional[str]:
    return missing(req, *_survey(ExitStack()))


def _repair(req: Request) -> None:
    from cnichain.plugins.bridge import firewall

    masq, spoof = wants(req)
    if masq:
        firewall.add_masquerade(req.network_name, req.container_id, req.ifname, masq, rebuild=True)
    if spoof is not None:
        firewall.add_spoof_check(req.network_name, req.container_id, req.ifname, *spoof)


def _undo(req: Request) -> None:
    from cnichain.plugins.bridge import firewall

    masq, spoof = wants(req)
    if masq:
        firewall.remove_masquerade(req.network_name, req.container_id, req.ifname, masq)
    if spoof is not None:
        firewall.remove_spoof_check(req.network_name, req.container_id, req.ifname)


def parse_masquerade_holdings(holdings: list[tuple[str, str, str]]) -> list[Masquerade]:
    """One entry per attachment named in the comments of bridge's masquerade state."""
    from cnichain.plugins.bridge import rules

    found: dict[tuple[str, str, str], Masquerade] = {}
    for _tag, comment, address in holdings:
        owner = rules.attachment_of(comment)
        if owner is None:
            continue
        network, ifname, cid = owner
        entry = found.setdefault((network, cid, ifname), Masquerade(network, cid, ifname))
        entry.addresses.append(address)
    return list(found.values())


def masquerades() -> list[Masquerade]:
    """bridge's masquerade state in the caller's namespace, one entry per attachment."""
    from cnichain.plugins.bridge import firewall

    return parse_masquerade_holdings(firewall.masquerade_holdings() or [])


def _describe(items: list[Any]) -> list[str]:
    return [f"masquerade {','.join(m.addresses)}" for m in items]


def _collect(network: str, container_id: str, items: list[Any]) -> list[str]:
    from cnichain.plugins.bridge import firewall

    out = []
    for m in items:
        firewall.remove_masquerade(network, container_id, m.ifname)
        firewall.remove_spoof_check(network, container_id, m.ifname)
        out.append(f"removed masquerade of {','.join(m.addresses)}")
    return out


STATE = PluginState(
    "bridge",
    repair=Repair(frozenset({NFT}), applies, _check, _repair, _undo, _survey, _intact),
    leftovers=Leftovers(_describe, _collect),
)
