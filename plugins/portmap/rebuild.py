"""The slow path: rebuild the dispatch of the keys involved from a full listing of our table.

Used when the fast path was refused (a key shared with another container, a re-ADD, a table that
does not exist yet) and by GC.  The invariant it restores, whatever happened before: every key
dispatches to exactly its live claimants, oldest first -- straight to the owner's chain when there
is one claimant, through a ``b-<key>`` chain jumping to each when there are several.  Pure: it
returns one transaction as a list of libnftables JSON commands (:mod:`.commands`); :mod:`.kernel`
applies it under the namespace lock.
"""

from __future__ import annotations

from cnichain.common.record import Record

from . import commands as nft
from .names import (
    DNAT_CHAIN_PREFIX,
    ID_PREFIX,
    bucket_chain,
    dnat_chain,
    key_from_element,
    keys_of_rules,
    masq_chain,
    network_digest,
    owner_id,
)
from .plan import owner_chains, element, skeleton

TYPE_CHECKING = False
if TYPE_CHECKING:  # annotations only: typing costs milliseconds per exec
    from typing import Iterable, Optional

    from .plan import OwnerPlan


class Snapshot(Record):
    """Our table as listed: chains (handle, rule comments, jump targets) and map elements."""

    chains: dict[str, int]  # name -> handle
    comments: dict[str, list[str]]  # chain -> rule comments
    elements: dict[str, str]  # key -> jump target

    def __init__(
        self,
        chains: Optional[dict[str, int]] = None,
        comments: Optional[dict[str, list[str]]] = None,
        elements: Optional[dict[str, str]] = None,
    ) -> None:
        self.chains = {} if chains is None else chains
        self.comments = {} if comments is None else comments
        self.elements = {} if elements is None else elements

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
                mp = obj["map"]
                for item in mp.get("elem") or []:
                    if not isinstance(item, list) or len(item) != 2:
                        continue
                    key = key_from_element(mp["name"], item[0])
                    jump = item[1].get("jump") if isinstance(item[1], dict) else None
                    if key and isinstance(jump, dict):
                        snap.elements[key] = str(jump.get("target", ""))
        return snap

    def owners(self) -> list[str]:
        """Owner hashes in creation order (chain handles grow monotonically)."""
        names = [n for n in self.chains if n.startswith(DNAT_CHAIN_PREFIX)]
        return [n[len(DNAT_CHAIN_PREFIX):] for n in sorted(names, key=lambda n: self.chains[n])]

    def identity(self, owner: str) -> str:
        for c in self.comments.get(dnat_chain(owner), []):
            if c.startswith(ID_PREFIX):
                return c
        return ""

    def keys(self, owner: str) -> tuple[list[str], list[str]]:
        return keys_of_rules(self.comments.get(dnat_chain(owner), []))


def rebuild(snap: Snapshot, remove: Iterable[str] = (), add: Optional[OwnerPlan] = None) -> list[dict]:
    """One transaction that removes owners ``remove``, (re)installs ``add`` and leaves every key
    those owners touch dispatching to exactly the remaining claimants, oldest first.

    Deletions of chains go last (``late``): a chain can only be deleted once no element or bucket
    jumps to it any more, which the earlier commands of the same transaction ensure.
    """
    remove = [o for o in remove if dnat_chain(o) in snap.chains and (add is None or o != add.owner)]
    out: list[dict] = skeleton() if add is not None else []
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
        groups.append(add.dnat_keys + add.masq_keys)
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
    """For each affected key, its remaining owners in creation order.

    A re-added container keeps its place in line (its chain handle is older than later pods');
    a new one goes last.
    """
    claimants: dict[str, list[str]] = {k: [] for k in affected}
    for o in snap.owners():
        if o in remove or (add is not None and o == add.owner):
            continue
        dnat, masq = snap.keys(o)
        for k in dnat + masq:
            if k in claimants:
                claimants[k].append(o)
    if add is None:
        return claimants
    known = dnat_chain(add.owner) in snap.chains
    for k in add.dnat_keys + add.masq_keys:
        line = claimants[k]
        if known:
            mine = snap.chains[dnat_chain(add.owner)]
            line.insert(len([o for o in line if snap.chains[dnat_chain(o)] < mine]), add.owner)
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
