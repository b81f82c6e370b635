"""The slow path: decide and rebuild the keys involved from a full listing of our table.

Used when a fast path was refused (a key another container claims, a re-ADD with other mappings,
a DEL whose config differs from its ADD, a table without the map layout yet) and by GC.  The
invariant it restores, whatever happened before: every key has one *line* of live claimants, in
the order they claimed it.  The first claimant of a free key, when the config has no conditions,
holds it in the map layout (:mod:`.maps`): one element per key, no chain.  Every other claim --
a later claimant of a held key, a config with ``conditionsV4/V6``, a pod of the previous release
-- is in the chain layout: the container's ``c-``/``m-`` chains and a verdict-map element per key,
straight to the chain when it is the only one in the chain layout, through a ``b-<key>`` chain
jumping to each, in line order, when there are several.  ``hostports`` tries the map layout
first, so the line is: the key's owner in the maps, then the chain layout's claimants.  A claim
keeps its place across re-ADDs; a new claim joins the end.  Pure: it returns one transaction as a
list of libnftables JSON commands (:mod:`.commands`); :mod:`.kernel` applies it under the
namespace lock, after :func:`.plan.declarations`.
"""

from __future__ import annotations

import json

from cnichain.common.record import Record

from . import commands as nft
from . import maps
from .names import (
    BUCKET_CHAIN_PREFIX,
    CHAIN_LAYOUT,
    DNAT_CHAIN_PREFIX,
    ID_PREFIX,
    MASQ_CHAIN_PREFIX,
    OWN_MAPS,
    OWNERS,
    SETS,
    TO_MAPS,
    as_addr,
    bucket_chain,
    dnat_chain,
    key_from_element,
    key_from_own,
    key_from_to,
    keys_of_rules,
    masq_chain,
    network_digest,
    owner_id,
)
from .plan import chain_layout_entry, element, owner_chains, skeleton

TYPE_CHECKING = False
if TYPE_CHECKING:  # annotations only: typing costs milliseconds per exec
    from typing import Any, Iterable, Optional

    from .plan import OwnerPlan

_OWN_NAMES = frozenset(OWN_MAPS.values())
_TO_NAMES = frozenset(name for name, _k, _v in TO_MAPS.values())


def _unwrap(item: Any) -> Any:
    """An element key as listed, without the ``{"elem": {"val": ..., "comment": ...}}`` wrapper."""
    if isinstance(item, dict) and isinstance(item.get("elem"), dict):
        return item["elem"].get("val")
    return item


def _comment(item: Any) -> str:
    if isinstance(item, dict) and isinstance(item.get("elem"), dict):
        return str(item["elem"].get("comment", ""))
    return ""


def _target(value: Any) -> Optional[tuple[str, int]]:
    if isinstance(value, dict) and isinstance(value.get("concat"), list) and len(value["concat"]) == 2:
        addr, port = value["concat"]
        if isinstance(port, int):
            return str(addr), port
    return None


def set_token(elem: Any) -> str:
    """A set element as one comparable string, the same for the listed and the planned form."""
    return json.dumps(elem, sort_keys=True)


class Snapshot(Record):
    """Our table as listed: the chain layout's chains (handle, rule comments) and verdict-map
    elements, the map layout's owners, ownership and targets, and the masquerade sets."""

    chains: dict[str, int]  # name -> handle
    comments: dict[str, list[str]]  # chain -> rule comments
    elements: dict[str, str]  # key -> jump target (the chain layout)
    own: dict[str, str]  # key -> owner hash (the map layout)
    to: dict[str, tuple[str, int]]  # DNAT key -> (pod address, port) (the map layout)
    digests: dict[str, str]  # owner hash -> digest hash (CHAIN_LAYOUT's for the chain layout)
    identities: dict[str, str]  # owner hash -> identity comment, from OWNERS
    set_elements: dict[str, set[str]]  # set -> its elements (set_token)

    def __init__(
        self,
        chains: Optional[dict[str, int]] = None,
        comments: Optional[dict[str, list[str]]] = None,
        elements: Optional[dict[str, str]] = None,
        own: Optional[dict[str, str]] = None,
        to: Optional[dict[str, tuple[str, int]]] = None,
        digests: Optional[dict[str, str]] = None,
        identities: Optional[dict[str, str]] = None,
        set_elements: Optional[dict[str, set[str]]] = None,
    ) -> None:
        self.chains = {} if chains is None else chains
        self.comments = {} if comments is None else comments
        self.elements = {} if elements is None else elements
        self.own = {} if own is None else own
        self.to = {} if to is None else to
        self.digests = {} if digests is None else digests
        self.identities = {} if identities is None else identities
        self.set_elements = {} if set_elements is None else set_elements

    @classmethod
    def from_json(cls, objects: list[dict]) -> "Snapshot":
        snap = cls()
        for obj in objects:
            if "chain" in obj:
                ch = obj["chain"]
                snap.chains[ch["name"]] = int(ch.get("handle", 0))
                snap.comments.setdefault(ch["name"], [])
            elif "rule" in obj:
                r = obj["rule"]
                snap.comments.setdefault(r["chain"], []).append(str(r.get("comment", "")))
            elif "map" in obj:
                snap._map(obj["map"])
            elif "set" in obj and obj["set"].get("name") in SETS:
                tokens = snap.set_elements.setdefault(obj["set"]["name"], set())
                tokens.update(set_token(_unwrap(e)) for e in obj["set"].get("elem") or [])
        return snap

    def _map(self, mp: dict) -> None:
        name = mp.get("name")
        for item in mp.get("elem") or []:
            if not isinstance(item, list) or len(item) != 2:
                continue
            key, value = _unwrap(item[0]), item[1]
            if name == OWNERS:
                owner = maps.owner_of(key)
                if owner:
                    self.digests[owner] = maps.owner_of(value)
                    self.identities[owner] = _comment(item[0])
            elif name in _OWN_NAMES:
                k = key_from_own(str(name), key)
                if k:
                    self.own[k] = maps.owner_of(value)
            elif name in _TO_NAMES:
                k, target = key_from_to(str(name), key), _target(value)
                if k and target:
                    self.to[k] = target
            else:
                k = key_from_element(str(name), key)
                jump = value.get("jump") if isinstance(value, dict) else None
                if k and isinstance(jump, dict):
                    self.elements[k] = str(jump.get("target", ""))

    def has_set_element(self, set_name: str, elem: Any) -> bool:
        return set_token(elem) in self.set_elements.get(set_name, set())

    def map_owners(self) -> list[str]:
        """Owners of the map layout: those OWNERS holds a digest for, and any the ownership maps
        name without one (a table written piecemeal by hand)."""
        out = [o for o, d in self.digests.items() if d != CHAIN_LAYOUT]
        return out + [o for o in dict.fromkeys(self.own.values()) if o and o not in self.digests]

    def owners(self) -> list[str]:
        """Every container the table holds anything for: the chain layout's first, by age of their
        chains, then the map layout's."""
        return list(dict.fromkeys(self.chain_owners() + list(self.digests) + self.map_owners()))

    def chain_owners(self) -> list[str]:
        """Owners of the chain layout in creation order (chain handles grow monotonically)."""
        names = [n for n in self.chains if n.startswith(DNAT_CHAIN_PREFIX)]
        return [n[len(DNAT_CHAIN_PREFIX):] for n in sorted(names, key=lambda n: self.chains[n])]

    def identity(self, owner: str) -> str:
        if self.identities.get(owner):
            return self.identities[owner]
        for c in self.comments.get(dnat_chain(owner), []):
            if c.startswith(ID_PREFIX):
                return c
        return ""

    def keys(self, owner: str) -> tuple[list[str], list[str]]:
        """The keys the owner's chains claim (the chain layout)."""
        return keys_of_rules(self.comments.get(dnat_chain(owner), []))

    def map_keys(self, owner: str) -> list[str]:
        """The keys the owner holds in the map layout."""
        return [k for k, o in self.own.items() if o == owner]

    def line(self, key: str) -> list[str]:
        """The chain layout's claimants of ``key`` in the order its dispatch tries them."""
        target = self.elements.get(key)
        if target is None:
            return []
        if target.startswith(BUCKET_CHAIN_PREFIX):
            return [o for o in self.comments.get(target, []) if dnat_chain(o) in self.chains]
        prefix = MASQ_CHAIN_PREFIX if key.startswith("masq/") else DNAT_CHAIN_PREFIX
        owner = target[len(prefix):] if target.startswith(prefix) else ""
        return [owner] if dnat_chain(owner) in self.chains else []

    def chain_claims(self) -> dict[str, list[str]]:
        """Key -> the chain layout's owners whose chains claim it, by age of their chains."""
        out: dict[str, list[str]] = {}
        for o in self.chain_owners():
            for k in sum(self.keys(o), []):
                out.setdefault(k, []).append(o)
        return out


def map_layout_allowed(snap: Snapshot, plan: OwnerPlan) -> bool:
    """``plan`` may hold its keys in the map layout: it has no conditions, and each key is its own
    there already or free in both layouts (a claimant in the chain layout came first)."""
    if plan.conditioned:
        return False
    claims = snap.chain_claims()
    for k in plan.keys:
        held = snap.own.get(k)
        if held == plan.owner:
            continue
        if held or [o for o in claims.get(k, []) if o != plan.owner]:
            return False
    return True


def rebuild(snap: Snapshot, remove: Iterable[str] = (), add: Optional[OwnerPlan] = None) -> list[dict]:
    """One transaction that removes owners ``remove`` from both layouts, (re)installs ``add`` in
    the layout its keys allow, and leaves every key those owners touch with its line of claimants.

    Deletions of chains go last (``late``): a chain can only be deleted once no element or bucket
    jumps to it any more, which the earlier commands of the same transaction ensure.
    """
    remove = [o for o in dict.fromkeys(remove) if add is None or o != add.owner]
    out: list[dict] = skeleton() + _registered(snap, remove, add) if add is not None else []
    for o in remove:
        out += maps.removal(snap, o)
    if add is None:
        return out + _chain_layout(snap, remove, None)
    out += maps.removal(snap, add.owner)  # what it held before, whatever it holds now
    if map_layout_allowed(snap, add):
        chained = [add.owner] if dnat_chain(add.owner) in snap.chains else []
        return out + _chain_layout(snap, remove + chained, None) + maps.claim(add, probe=False)
    return out + [nft.items(OWNERS, [chain_layout_entry(add)])] + _chain_layout(snap, remove, add)


def _registered(snap: Snapshot, remove: list[str], add: OwnerPlan) -> list[dict]:
    """OWNERS elements for the previous release's pods (their chains, no element), written with
    the skeleton: from then on a DEL tells whether a container is here without listing the table
    (:func:`.kernel.holds`)."""
    out = []
    for o in snap.chain_owners():
        if o in snap.digests or o in remove or o == add.owner:
            continue
        identity = snap.identity(o)
        key = nft.commented(as_addr(o), identity) if identity else as_addr(o)
        out.append(nft.items(OWNERS, [[key, as_addr(CHAIN_LAYOUT)]]))
    return out


def _chain_layout(snap: Snapshot, remove: list[str], add: Optional[OwnerPlan]) -> list[dict]:
    """The chain layout's part: ``remove``'s chains gone, ``add``'s (re)installed, each key they
    touch dispatching to its remaining line."""
    remove = [o for o in remove if dnat_chain(o) in snap.chains]
    if not remove and add is None:
        return []
    out: list[dict] = []
    affected = _affected_keys(snap, remove, add)
    if add is not None:
        out += _reinstall(snap, add)
    claimants = _claimants(snap, affected, remove, add)
    late: list[dict] = []
    for key in affected:
        now, later = _dispatch(snap, key, claimants[key])
        out += now
        late += later
    late += _drop_owner_chains(snap, remove, add)
    return out + late


def _affected_keys(snap: Snapshot, remove: list[str], add: Optional[OwnerPlan]) -> list[str]:
    """Every key a removed owner held, the added owner held before, or the added owner claims."""
    affected: list[str] = []
    groups = [sum(snap.keys(o), []) for o in remove]
    if add is not None:
        groups.append(sum(snap.keys(add.owner), []))  # a re-ADD may drop keys it had before
        groups.append(add.keys)
    for keys in groups:
        for k in keys:
            if k not in affected:
                affected.append(k)
    return affected


def _reinstall(snap: Snapshot, add: OwnerPlan) -> list[dict]:
    """The added owner's chains, emptied first when they exist (a re-ADD), then filled."""
    out = []
    if dnat_chain(add.owner) in snap.chains:
        out.append(nft.flush_chain(dnat_chain(add.owner)))
    if masq_chain(add.owner) in snap.chains:
        out.append(nft.flush_chain(masq_chain(add.owner)))
    return out + owner_chains(add, create=False)


def _claimants(
    snap: Snapshot, affected: list[str], remove: list[str], add: Optional[OwnerPlan]
) -> dict[str, list[str]]:
    """For each affected key, its remaining chain-layout claimants in line order.

    The line is the key's dispatch as listed, then any owner whose chain claims the key but the
    dispatch lost (by age of its chain).  A re-added owner keeps the place its claim had (the
    front, when it held the key in the maps); a new claim joins the end.
    """
    gone = set(remove) | ({add.owner} if add is not None else set())
    claims = snap.chain_claims()
    claimants: dict[str, list[str]] = {}
    for k in affected:
        line = [o for o in snap.line(k) if o not in gone]
        line += [o for o in claims.get(k, []) if o not in gone and o not in line]
        claimants[k] = line
    if add is None:
        return claimants
    for k in add.keys:
        line, prior = claimants[k], snap.line(k)
        if snap.own.get(k) == add.owner:
            line.insert(0, add.owner)  # it held the key in the maps: it is the first in line
        elif add.owner in prior:
            ahead = set(prior[:prior.index(add.owner)])
            line.insert(len([o for o in line if o in ahead]), add.owner)
        else:
            line.append(add.owner)
    return claimants


def _dispatch(snap: Snapshot, key: str, owners: list[str]) -> tuple[list[dict], list[dict]]:
    """(commands now, chain deletions last) that make ``key`` dispatch to ``owners``."""
    chain_of = masq_chain if key.startswith("masq/") else dnat_chain
    bucket = bucket_chain(key)
    out: list[dict] = []
    late: list[dict] = []
    if len(owners) >= 2:
        out.append(nft.flush_chain(bucket) if bucket in snap.chains else nft.chain(bucket))
        out += [nft.rule(bucket, [nft.jump(chain_of(o))], o) for o in owners]
        target = bucket
    else:
        target = chain_of(owners[0]) if owners else ""
        if bucket in snap.chains:
            late += [nft.flush_chain(bucket), nft.delete_chain(bucket)]
    current = snap.elements.get(key)
    if current != target:
        if current is not None:
            out.append(element(key, verb="delete"))
        if target:
            out.append(element(key, target, "create"))
    return out, late


def _drop_owner_chains(snap: Snapshot, remove: list[str], add: Optional[OwnerPlan]) -> list[dict]:
    """Deletion of the removed owners' chains, and of a re-added owner's now unused masq chain."""
    late: list[dict] = []
    for o in remove:
        for ch in (dnat_chain(o), masq_chain(o)):
            if ch in snap.chains:
                late += [nft.flush_chain(ch), nft.delete_chain(ch)]
    if add is not None and not add.masq_rules and masq_chain(add.owner) in snap.chains:
        late.append(nft.delete_chain(masq_chain(add.owner)))
    return late


def stale_owners(snap: Snapshot, network: str, valid_container_ids: Iterable[str]) -> list[str]:
    """GC: owners of ``network`` whose container is not among the valid attachments."""
    tag = f"{ID_PREFIX}{network_digest(network)} "
    keep = {owner_id(network, cid) for cid in valid_container_ids}
    return [o for o in snap.owners() if snap.identity(o).startswith(tag) and o not in keep]
