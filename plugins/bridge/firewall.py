"""bridge's nftables side: the masquerade and MAC spoof-check rules, applied and removed through
libnftables (common.nft), each change one transaction.

The rules themselves are built by :mod:`.rules` (pure); this module lists the chains, works out which
of an attachment's rules are stale, and applies the builders' commands.  Removal looks rules up by their
owner tag, so it needs nothing but the network name, container ID and ifname: it works after the pod
netns is gone, after a half-finished ADD, and twice in a row (a missing table or rule is "already
removed").  The rule builders (.rules, which loads hashlib) are imported only inside the functions.
"""

from __future__ import annotations

from cnichain.common import nft
from cnichain.common.errors import CniError
from cnichain.common.log import log

TYPE_CHECKING = False
if TYPE_CHECKING:  # annotations only: typing costs milliseconds on every exec
    from typing import Iterable, Optional


def _masq_list() -> str:
    from .rules import MASQ_CHAIN, MASQ_TABLE

    return f"list chain inet {MASQ_TABLE} {MASQ_CHAIN}"


def _spoof_list() -> str:
    from .rules import SPOOF_CHAIN, SPOOF_TABLE

    return f"list chain bridge {SPOOF_TABLE} {SPOOF_CHAIN}"


def _listing(command: str) -> Optional[list[dict]]:
    return nft.list_ruleset(command)


def add_masquerade(network: str, container_id: str, ifname: str, addresses: Iterable[str]) -> None:
    from . import rules

    tag = rules.owner_tag(network, container_id, ifname)
    text = rules.comment(network, container_id, ifname)
    addresses = list(addresses)
    for attempt in range(2):
        stale = rules.owned_handles(_listing(_masq_list()), tag)
        try:
            nft.apply(rules.masq_add(addresses, text, stale), "failed to set up IP masquerading")
            return
        except CniError:
            if attempt or not stale:  # a retry only helps if a stale rule vanished under us
                raise


def remove_masquerade(network: str, container_id: str, ifname: str) -> None:
    from . import rules

    _remove(_masq_list(), "inet", rules.MASQ_TABLE, rules.MASQ_CHAIN,
            rules.owner_tag(network, container_id, ifname), "failed to remove IP masquerading")


def remove_reference_rules(network: str, container_id: str, ifname: str, *, masq: bool, spoof: bool) -> None:
    """Swap in place: the masquerade rules (iptables ``CNI-<hash>`` chain or ``inet
    cni_plugins_masquerade``) and spoof-check chains (``bridge nat``) the reference bridge made
    for this attachment, found by its own tags."""
    from cnichain.common import reference_rules

    done: list[dict] = []
    if masq:
        done += reference_rules.remove(
            reference_rules.masquerade_target(network, container_id, ifname),
            f"remove the reference masquerade rules of {container_id}",
        )
    if spoof:
        done += reference_rules.remove(
            reference_rules.spoof_check_target(container_id, ifname),
            f"remove the reference spoof-check chains of {container_id}",
        )
    if done:
        log.info(f"bridge: removed {len(done)} nftables objects the reference bridge left for {container_id}")


def reference_masquerade_present(network: str, container_id: str, ifname: str) -> bool:
    """The reference bridge's masquerade for this attachment is in place (a pod it set up)."""
    from cnichain.common import reference_rules

    return reference_rules.present(reference_rules.masquerade_target(network, container_id, ifname))
def masquerade_listing() -> Optional[list[dict]]:
    """Our masquerade chain as libnftables JSON (None: no table); read-only, for whole-node views."""
    return _listing(_masq_list())


def spoof_listing() -> Optional[list[dict]]:
    """Our MAC spoof-check chain as libnftables JSON (None: no table); read-only, for whole-node views."""
    return _listing(_spoof_list())


def masquerade_addresses(network: str, container_id: str, ifname: str) -> Optional[list[str]]:
    """Source addresses of this attachment's masquerade rules (None: no table at all)."""
    from . import rules

    listing = _listing(_masq_list())
    if listing is None:
        return None
    tag = rules.owner_tag(network, container_id, ifname)
    out: list[str] = []
    for rule in rules.rules_in(listing):
        if str(rule.get("comment", "")).startswith(tag):
            out.extend(rules.rule_addresses(rule))
    return out


def add_spoof_check(network: str, container_id: str, ifname: str, host_veth: str, mac: str) -> None:
    from . import rules

    tag = rules.owner_tag(network, container_id, ifname)
    text = rules.comment(network, container_id, ifname)
    stale = rules.owned_handles(_listing(_spoof_list()), tag)
    nft.apply(rules.spoof_add(host_veth, mac, text, stale), "failed to set up MAC spoof check")


def remove_spoof_check(network: str, container_id: str, ifname: str) -> None:
    from . import rules

    _remove(_spoof_list(), "bridge", rules.SPOOF_TABLE, rules.SPOOF_CHAIN,
            rules.owner_tag(network, container_id, ifname), "failed to remove MAC spoof check")


def gc(network: str, keep_tags: set[str]) -> None:
    """Drop this network's rules whose attachment is not in ``keep_tags``."""
    from . import rules

    for listing_cmd, family, table, chain in (
        (_masq_list(), "inet", rules.MASQ_TABLE, rules.MASQ_CHAIN),
        (_spoof_list(), "bridge", rules.SPOOF_TABLE, rules.SPOOF_CHAIN),
    ):
        handles = rules.stale_for_gc(_listing(listing_cmd), network, keep_tags)
        if handles:
            _apply_delete(listing_cmd, family, table, chain, handles, None, "failed to garbage-collect rules")


def _remove(listing_cmd: str, family: str, table: str, chain: str, tag: str, what: str) -> None:
    from . import rules

    handles = rules.owned_handles(_listing(listing_cmd), tag)
    if handles:
        _apply_delete(listing_cmd, family, table, chain, handles, tag, what)


def _apply_delete(listing_cmd: str, family: str, table: str, chain: str, handles: list[int],
                  tag: Optional[str], what: str) -> None:
    from . import rules

    try:
        nft.apply(rules.delete_rules(family, table, chain, handles), what)
    except CniError:
        # A concurrent DEL/GC may have removed some of them first: retry with what is left.
        listing = _listing(listing_cmd)
        present = {r["handle"] for r in rules.rules_in(listing)}
        left = [h for h in handles if h in present]
        if left:
            nft.apply(rules.delete_rules(family, table, chain, left), what)


def nft_unusable(*, masq: bool, spoof: bool) -> Optional[str]:
    """Why the nftables families this config needs cannot be worked with (None: they can):
    ``inet`` for the masquerade table, ``bridge`` for the MAC spoof check."""
    from cnichain.common.nft import unusable_reason

    for family in (["inet"] if masq else []) + (["bridge"] if spoof else []):
        reason = unusable_reason(family)
        if reason is not None:
            return reason
    return None
