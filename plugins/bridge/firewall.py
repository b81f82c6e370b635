"""bridge's nftables side: the masquerade elements and MAC spoof-check rules, applied and removed
through libnftables (common.nft), each change one transaction.

The objects themselves are built by :mod:`.rules` (pure); this module applies the builders'
commands and, where it must, lists.  The masquerade's ADD and DEL list nothing: each is one
transaction of element commands (see :mod:`.rules`), and only a refusal -- the table or a subnet's
chain missing, an address another attachment still holds, a DEL that does not know the pod's
addresses -- falls back to listing the owner maps.  The previous release's per-pod rules are looked
up by their owner tag in their own chain, which a node that never ran that release does not have.
Removal works after the pod netns is gone, after a half-finished ADD, and twice in a row (a missing
table or element is "already removed").  The builders (.rules, which loads hashlib) are imported
only inside the functions.
"""

from __future__ import annotations

import errno

from cnichain.common import nft
from cnichain.common.errors import CniError
from cnichain.common.kernel_errors import NftError
from cnichain.common.log import log

TYPE_CHECKING = False
if TYPE_CHECKING:  # annotations only: typing costs milliseconds on every exec
    from typing import Callable, Iterable, Optional

# Refusals of an element transaction that a fresh listing gets past: an object missing (ENOENT),
# an element held by another attachment (EEXIST), or one that changed meanwhile (EBUSY).
_REFUSED = (errno.ENOENT, errno.EEXIST, errno.EBUSY)
SLOW_ATTEMPTS = 4


def _masq_list() -> str:
    from .rules import MASQ_CHAIN, MASQ_TABLE

    return f"list chain inet {MASQ_TABLE} {MASQ_CHAIN}"


def _spoof_list() -> str:
    from .rules import SPOOF_CHAIN, SPOOF_TABLE

    return f"list chain bridge {SPOOF_TABLE} {SPOOF_CHAIN}"


def _listing(command: str) -> Optional[list[dict]]:
    return nft.list_ruleset(command)


def add_masquerade(network: str, container_id: str, ifname: str, addresses: Iterable[str],
                   rebuild: bool = False) -> None:
    """ADD: claim ``addresses`` for this attachment -- one transaction of element adds.  When the
    kernel refuses it for a missing object (the first pod, a new subnet), the table's fixed part
    (maps, ``pods``, the subnets' chains: written whole again, a constant size) goes in front of the
    claim; ``rebuild`` (the reconciler's repair) always puts it there, so a flushed chain comes
    back.  Only a claim refused because another attachment holds an address lists the owner maps.

    The fixed part is not in every ADD: rewriting it deletes rules, and rule deletions wake the
    reconciler (a pass after every burst of ADDs, for nothing).
    """
    from . import rules

    addresses = list(addresses)
    if not addresses:
        return
    owner = rules.owner_addr(network, container_id, ifname)
    text = rules.comment(network, container_id, ifname)
    claim, fixed = rules.masq_claim(addresses, owner, text), rules.masq_skeleton(addresses)
    what = "failed to set up IP masquerading"
    tries = [fixed + claim] if rebuild else [claim, fixed + claim]
    for commands in tries:
        refused = _try(commands, what)
        if refused is None:
            return
        if refused.errno != errno.ENOENT:
            break
    # IPAM gave these addresses to this attachment, so another owner's element for one of them is
    # a leftover (an attachment whose DEL never came): it is replaced, in the same transaction.
    _apply_listed(lambda held: fixed + rules.masq_drop(_by_address(held), addresses) + claim, what)


def remove_masquerade(network: str, container_id: str, ifname: str, addresses: Iterable[str] = ()) -> None:
    """DEL: this attachment's elements -- with ``addresses`` (the cached result's) one transaction
    that lists nothing; without them, or refused, this owner's elements as the owner maps list
    them -- and whatever the previous release's chain holds for it."""
    from . import rules

    owner = rules.owner_addr(network, container_id, ifname)
    addresses = list(addresses)
    if not addresses or _try(rules.masq_release(addresses, owner), "failed to remove IP masquerading") is not None:
        _release_listed(lambda held_owner: held_owner == owner)
    if _legacy_chain_present():
        _remove(_masq_list(), "inet", rules.MASQ_TABLE, rules.MASQ_CHAIN,
                rules.owner_tag(network, container_id, ifname), "failed to remove IP masquerading")


def _legacy_chain_present() -> bool:
    """Whether the previous release's chain of per-pod rules is there, from the family's chain
    names alone: listing a chain of our table makes libnftables fetch every element of its maps."""
    from . import rules

    for item in _listing("list chains inet") or []:
        chain = item.get("chain") if isinstance(item, dict) else None
        if chain and chain.get("table") == rules.MASQ_TABLE and chain.get("name") == rules.MASQ_CHAIN:
            return True
    return False


def _held() -> dict[str, tuple[str, str, str]]:
    """Address -> (owner value, owner comment, net chain) in the owner and net maps ({}: no table)."""
    from . import rules

    listing: list[dict] = []
    for name in (*rules.POD_OWNERS.values(), *rules.POD_NETS.values()):
        listing += _listing(f"list map inet {rules.MASQ_TABLE} {name}") or []
    return rules.held_in(listing)


def _by_address(held: dict[str, tuple[str, str, str]]) -> dict[str, tuple[str, str]]:
    return {a: (owner, chain) for a, (owner, _comment, chain) in held.items()}


def _apply_listed(build: Callable[[dict[str, tuple[str, str, str]]], list[dict]], what: str) -> None:
    """Apply what ``build`` makes of a listing of the owner and net maps (nothing: done); again
    from a fresh listing when a concurrent change got in between, a bounded number of times."""
    last: Optional[NftError] = None
    for _attempt in range(SLOW_ATTEMPTS):
        commands = build(_held())
        if not commands:
            return
        last = _try(commands, what)
        if last is None:
            return
    assert last is not None
    raise last


def _try(commands: list[dict], what: str) -> Optional[NftError]:
    """Apply ``commands``: None when they went through, the refusal when a listing can get past it
    (any other error raises)."""
    try:
        nft.apply(commands, what)
        return None
    except NftError as exc:
        if exc.errno not in _REFUSED:
            raise
        return exc


def _release_listed(whose: Callable[[str], bool]) -> None:
    """Delete the elements of the addresses whose owner value ``whose`` picks, from a listing."""
    from . import rules

    def build(held: dict[str, tuple[str, str, str]]) -> list[dict]:
        picked = [a for a, (owner, _comment, _chain) in held.items() if owner and whose(owner)]
        return rules.masq_drop(_by_address(held), picked)

    _apply_listed(build, "failed to remove IP masquerading")


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


def masquerade_holdings() -> Optional[list[tuple[str, str, str]]]:
    """Every address masqueraded in fact, as ``(owner tag, comment, address)``: an owner element
    whose net element points to its subnet's chain, that chain holding its rule and ``pods``
    dispatching the family; and the previous release's rules (None: no table at all).  Read-only,
    for CHECK, the reconciler and whole-node views."""
    import ipaddress

    from . import rules

    table = _listing(f"list table inet {rules.MASQ_TABLE}")  # one fetch: maps, chains and rules
    if table is None:
        return None
    families = rules.dispatched_families(table)
    out: list[tuple[str, str, str]] = []
    for address, (owner, comment, chain) in rules.held_in(table).items():
        if owner and chain and ipaddress.ip_address(address).version in families and rules.rules_in(table, chain):
            out.append((rules.tag_of_owner(owner), comment, address))
    for rule in rules.rules_in(table, rules.MASQ_CHAIN):
        text = str(rule.get("comment", ""))
        out += [(rules.tag_of(text), text, a.split("/")[0]) for a in rules.rule_addresses(rule)]
    return out


def spoof_listing() -> Optional[list[dict]]:
    """Our MAC spoof-check chain as libnftables JSON (None: no table); read-only, for whole-node views."""
    return _listing(_spoof_list())


def masquerade_addresses(network: str, container_id: str, ifname: str) -> Optional[list[str]]:
    """The addresses masqueraded for this attachment (None: no table at all)."""
    from . import rules

    holdings = masquerade_holdings()
    if holdings is None:
        return None
    tag = rules.owner_tag(network, container_id, ifname)
    return [address for owner_tag, _comment, address in holdings if owner_tag == tag]


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
    """Drop this network's masquerade elements and rules whose attachment is not in ``keep_tags``."""
    from . import rules

    prefix = rules.network_tag(network) + "-"
    _release_listed(lambda owner: (tag := rules.tag_of_owner(owner)).startswith(prefix) and tag not in keep_tags)
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
