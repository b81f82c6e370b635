"""Applying and removing the bridge plugin's nftables rules (masquerade, MAC spoof check).

Each change is one libnftables transaction (common.nft).  Removal looks rules up by their owner tag,
so it needs nothing but the network name, container ID and ifname: it works after the pod netns is
gone, after a half-finished ADD, and twice in a row (a missing table or rule is "already removed").
"""

from __future__ import annotations

from cnichain.common import nft
from cnichain.common.errors import CniError

from . import nftplan

TYPE_CHECKING = False
if TYPE_CHECKING:  # annotations only: typing costs milliseconds on every exec
    from typing import Iterable, Optional

_MASQ_LIST = f"list chain inet {nftplan.MASQ_TABLE} {nftplan.MASQ_CHAIN}"
_SPOOF_LIST = f"list chain bridge {nftplan.SPOOF_TABLE} {nftplan.SPOOF_CHAIN}"


def _listing(command: str) -> Optional[list[dict]]:
    return nft.list_ruleset(command)


def add_masquerade(network: str, container_id: str, ifname: str, addresses: Iterable[str]) -> None:
    tag = nftplan.owner_tag(network, container_id, ifname)
    text = nftplan.comment(network, container_id, ifname)
    addresses = list(addresses)
    for attempt in range(2):
        stale = nftplan.owned_handles(_listing(_MASQ_LIST), tag)
        try:
            nft.apply(nftplan.masq_add(addresses, text, stale), "failed to set up IP masquerading")
            return
        except CniError:
            if attempt or not stale:  # a retry only helps if a stale rule vanished under us
                raise


def remove_masquerade(network: str, container_id: str, ifname: str) -> None:
    _remove(_MASQ_LIST, "inet", nftplan.MASQ_TABLE, nftplan.MASQ_CHAIN,
            nftplan.owner_tag(network, container_id, ifname), "failed to remove IP masquerading")


def masquerade_addresses(network: str, container_id: str, ifname: str) -> Optional[list[str]]:
    """Source addresses of this attachment's masquerade rules (None: no table at all)."""
    listing = _listing(_MASQ_LIST)
    if listing is None:
        return None
    tag = nftplan.owner_tag(network, container_id, ifname)
    out: list[str] = []
    for rule in nftplan.rules_in(listing):
        if str(rule.get("comment", "")).startswith(tag):
            out.extend(nftplan.rule_addresses(rule))
    return out


def add_spoof_check(network: str, container_id: str, ifname: str, host_veth: str, mac: str) -> None:
    tag = nftplan.owner_tag(network, container_id, ifname)
    text = nftplan.comment(network, container_id, ifname)
    stale = nftplan.owned_handles(_listing(_SPOOF_LIST), tag)
    nft.apply(nftplan.spoof_add(host_veth, mac, text, stale), "failed to set up MAC spoof check")


def remove_spoof_check(network: str, container_id: str, ifname: str) -> None:
    _remove(_SPOOF_LIST, "bridge", nftplan.SPOOF_TABLE, nftplan.SPOOF_CHAIN,
            nftplan.owner_tag(network, container_id, ifname), "failed to remove MAC spoof check")


def gc(network: str, keep_tags: set[str]) -> None:
    """Drop this network's rules whose attachment is not in ``keep_tags``."""
    for listing_cmd, family, table, chain in (
        (_MASQ_LIST, "inet", nftplan.MASQ_TABLE, nftplan.MASQ_CHAIN),
        (_SPOOF_LIST, "bridge", nftplan.SPOOF_TABLE, nftplan.SPOOF_CHAIN),
    ):
        handles = nftplan.stale_for_gc(_listing(listing_cmd), network, keep_tags)
        if handles:
            _apply_delete(listing_cmd, family, table, chain, handles, None, "failed to garbage-collect rules")


def _remove(listing_cmd: str, family: str, table: str, chain: str, tag: str, what: str) -> None:
    handles = nftplan.owned_handles(_listing(listing_cmd), tag)
    if handles:
        _apply_delete(listing_cmd, family, table, chain, handles, tag, what)


def _apply_delete(listing_cmd: str, family: str, table: str, chain: str, handles: list[int],
                  tag: Optional[str], what: str) -> None:
    try:
        nft.apply(nftplan.delete_rules(family, table, chain, handles), what)
    except CniError:
        # A concurrent DEL/GC may have removed some of them first: retry with what is left.
        listing = _listing(listing_cmd)
        present = {r["handle"] for r in nftplan.rules_in(listing)}
        left = [h for h in handles if h in present]
        if left:
            nft.apply(nftplan.delete_rules(family, table, chain, left), what)
