"""portmap's map layout: a container's hostPorts as elements of shared maps and sets, no chain.

For a container (its *owner* hash ``A``) whose plan has digest ``D`` (nft's syntax)::

    owners        A : D                              comment "id <net digest> <network>/<container>"
    own_<kind>    <key> : A                          one per DNAT key, one per masqueraded address
    to_<kind>     <key> : <pod address> . <port>     one per DNAT key: what ``hostports`` DNATs to
    hairpin4/6    <pod> . <pod>, <pod> . 127.0.0.1   or masqall4/6 <pod> (``masqAll``)

ADD is one transaction of ``add`` commands (:func:`claim`).  The kernel adds an element that is
absent, does nothing for one present with the same value, and refuses (EEXIST) one present with
another value: a key another container owns, another target, a digest of other mappings.  Before
each key it probes the chain layout's verdict map for the same key -- ``create`` of an ``accept``
element, then its ``delete``, so nothing of the probe remains -- which the kernel refuses when a
container of the chain layout already claims the key (an older claim, or a pod of the previous
release).  Refused, nothing at all changed, and the slow path decides from a listing
(:mod:`.rebuild`).  So a repeated or retried ADD, or a repair of one lost element, is the same
transaction as the first.

DEL (:func:`release`) is the same claim followed by the deletes of every element: it goes through
only if every element is this container's with this plan's values, so no DEL removes another
container's element whatever address or port it reuses (an IP reused by a later pod keeps that
pod's hostPorts: the ownership map says whose each key is, as the reference's per-container rule
comments do).  A repeated DEL adds and deletes the same elements within its one transaction and
leaves the table as it found it.  Neither lists anything: each costs what it changes, at any
number of pods.  Pure: no kernel access.
"""

from __future__ import annotations

from . import commands as nft
from .names import (
    CHAIN_LAYOUT,
    OWNERS,
    as_addr,
    from_addr,
    key_map,
    masq_elements,
    own_element,
    to_element,
)

TYPE_CHECKING = False
if TYPE_CHECKING:  # annotations only: typing costs milliseconds per exec
    from typing import Any

    from .plan import OwnerPlan
    from .rebuild import Snapshot


def entries(plan: OwnerPlan) -> list[tuple[str, Any, Any]]:
    """(map or set, element key, value or None for a set) of everything ``plan`` installs."""
    owner = as_addr(plan.owner)
    out: list[tuple[str, Any, Any]] = [(OWNERS, owner, as_addr(plan.digest))]
    for key in plan.dnat_keys:
        own_map, elem_key = own_element(key)
        out.append((own_map, elem_key, owner))
        addr, port = plan.targets[key]
        to_map, to_key = to_element(key)
        out.append((to_map, to_key, {"concat": [addr, port]}))
    for key in plan.masq_keys:
        own_map, elem_key = own_element(key)
        out.append((own_map, elem_key, owner))
        out += [(name, elem, None) for name, elem in masq_elements(key.split("/", 1)[1], plan.masq_all)]
    return out


def _probe(key: str) -> list[dict]:
    """Refused (EEXIST) when the chain layout's verdict map holds ``key``; otherwise no trace."""
    vmap, elem_key = key_map(key)
    return [nft.items(vmap, [[elem_key, nft.ACCEPT]], "create"), nft.items(vmap, [elem_key], "delete")]


def claim(plan: OwnerPlan, probe: bool = True) -> list[dict]:
    """ADD: every element of ``plan`` added, refused when any of them holds another value (and,
    with ``probe``, when the chain layout claims one of its keys)."""
    out: list[dict] = []
    for name, key, value in entries(plan):
        if name == OWNERS:
            out.append(nft.items(name, [[nft.commented(key, plan.identity), value]]))
            if probe:
                for k in plan.keys:
                    out += _probe(k)
            continue
        out.append(nft.items(name, [key if value is None else [key, value]]))
    return out


def release(plan: OwnerPlan) -> list[dict]:
    """DEL: the claim (the kernel's proof that every element is this container's), then the
    deletes of every element."""
    return claim(plan) + [nft.items(name, [key], "delete") for name, key, _value in entries(plan)]


def presence_probe(owner: str) -> list[dict]:
    """A transaction the kernel refuses (EEXIST) when ``owner`` has an OWNERS element -- every
    container of either layout has one, a pod of the previous release once a rebuild saw it --
    and that otherwise leaves no trace."""
    addr = as_addr(owner)
    return [nft.items(OWNERS, [[addr, as_addr(CHAIN_LAYOUT)]], "create"), nft.items(OWNERS, [addr], "delete")]


# -- from a listing (the slow path) --------------------------------------------------------------


def removal(snap: Snapshot, owner: str) -> list[dict]:
    """The deletes of every element a listing shows ``owner`` holding in the map layout."""
    out: list[dict] = []
    for key, held_by in snap.own.items():
        if held_by != owner:
            continue
        name, elem_key = own_element(key)
        out.append(nft.items(name, [elem_key], "delete"))
        if key.startswith("masq/"):
            addr = key.split("/", 1)[1]
            for masq_all in (False, True):
                for set_name, elem in masq_elements(addr, masq_all):
                    if snap.has_set_element(set_name, elem):
                        out.append(nft.items(set_name, [elem], "delete"))
        elif key in snap.to:
            to_map, to_key = to_element(key)
            out.append(nft.items(to_map, [to_key], "delete"))
    if owner in snap.digests:
        out.append(nft.items(OWNERS, [as_addr(owner)], "delete"))
    return out


def owner_of(value: object) -> str:
    """The owner hash an ownership or OWNERS element holds ("" when it is not one)."""
    return from_addr(value) if isinstance(value, str) else ""
