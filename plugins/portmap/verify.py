"""What one container's plan must find in a listing of our table: the one reading behind CHECK
and the reconciler's "is it intact", for either layout (:mod:`.maps`, :mod:`.rebuild`).

Pure: it reads a :class:`.rebuild.Snapshot`, never the kernel.
"""

from __future__ import annotations

from .names import CHAIN_LAYOUT, FAMILY_TABLE, dnat_chain, masq_chain, masq_elements
from .plan import SKELETON_RULES

TYPE_CHECKING = False
if TYPE_CHECKING:  # annotations only: typing costs milliseconds per exec
    from typing import Optional

    from .plan import OwnerPlan
    from .rebuild import Snapshot


def problem(snap: Optional[Snapshot], plan: OwnerPlan) -> Optional[str]:
    """What is missing or different for ``plan`` (an error message), None when all is there."""
    if snap is None:
        return f"missing hostport rules: table {FAMILY_TABLE} not found"
    for chain, count in SKELETON_RULES.items():
        if len(snap.comments.get(chain, [])) < count:
            return f'missing hostport rules in shared chain "{chain}" of table {FAMILY_TABLE}'
    if plan.empty:
        return None
    digest = snap.digests.get(plan.owner)
    if (digest is not None and digest != CHAIN_LAYOUT) or snap.map_keys(plan.owner):
        return _in_maps(snap, plan)
    if not holds_any(snap, plan):
        return f"missing hostport rules: nothing of {plan.identity!r} in table {FAMILY_TABLE}"
    return _in_chains(snap, plan)


def holds_any(snap: Optional[Snapshot], plan: OwnerPlan) -> bool:
    """Whether the table holds anything of ``plan``'s owner: its OWNERS element, a map key or its
    per-pod chain (the layout of the previous release)."""
    return snap is not None and (plan.owner in snap.digests or bool(snap.map_keys(plan.owner))
                                 or dnat_chain(plan.owner) in snap.chains)


def _in_maps(snap: Snapshot, plan: OwnerPlan) -> Optional[str]:
    missing = [k for k in plan.keys if snap.own.get(k) != plan.owner]
    if missing:
        return f"missing hostport rules of {plan.identity!r}: {missing}"
    wrong = [k for k in plan.dnat_keys if snap.to.get(k) != plan.targets[k]]
    if wrong:
        return f"hostport rules of {plan.identity!r} lead elsewhere than the config says: {wrong}"
    for key in plan.masq_keys:
        for set_name, elem in masq_elements(key.split("/", 1)[1], plan.masq_all):
            if not snap.has_set_element(set_name, elem):
                return f"missing masquerade rules of {plan.identity!r} in set {set_name}"
    if snap.digests.get(plan.owner) != plan.digest:
        # Its keys are there, but not its OWNERS element as this config writes it: what ADD
        # installed was another config, or the element (GC's way to the container) is gone.
        return f"hostport rules of {plan.identity!r} were installed from another config"
    return None


def _in_chains(snap: Snapshot, plan: OwnerPlan) -> Optional[str]:
    chain = dnat_chain(plan.owner)
    have = snap.comments.get(chain)
    if have is None:
        return f'missing hostport rules: chain "{chain}" not found'
    missing = [k for k in plan.keys if k not in have or k not in snap.elements]
    if missing:
        return f"missing hostport rules in chain {chain!r}: {missing}"
    if plan.masq_rules and len(snap.comments.get(masq_chain(plan.owner), [])) < len(plan.masq_rules):
        return f'missing masquerade rules in chain "{masq_chain(plan.owner)}"'
    return None
