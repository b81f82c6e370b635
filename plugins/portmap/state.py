"""portmap's reconciler face: what it installed for an attachment, read back, repaired, collected.

Its state is its nftables table: the shared skeleton chains, and per container a DNAT chain (named
by its identity rule: network and container) with the keys of its map elements, and a masquerade
chain when the config asks for hairpin SNAT.

* check: its CHECK (our table, the shared chains, the container's chain and keys); repaired by its
  ADD, whose slow path rebuilds the table's skeleton and this container's chains and keys without
  touching any other container's (and flushes the UDP/SCTP conntrack entries of the ports);
* survey: one snapshot of the table per pass; intact: this container's chains and keys are in it;
* leftovers: a container no cache names is removed by owner (``remove_many`` of that owner's
  chains and keys), never by "everything not valid".
"""

from __future__ import annotations

from contextlib import ExitStack
from typing import Any, Optional

from cnichain.common.plugin_state import NFT, Leftovers, PluginState, Repair, checked
from cnichain.common.skel import Request

TYPE_CHECKING = False
if TYPE_CHECKING:
    from cnichain.plugins.portmap.listing import HeldMapping


def _applies(req: Request) -> bool:
    from cnichain.plugins.portmap.config import load

    return bool(load(req.conf).mappings) and req.prev_result is not None


def _survey(_stack: ExitStack) -> Any:
    from cnichain.plugins.portmap import kernel

    return kernel.snapshot()  # None: no table at all


def _intact(snap: Any, req: Request) -> bool:
    from cnichain.plugins.portmap.config import container_ips, load
    from cnichain.plugins.portmap.names import dnat_chain, masq_chain
    from cnichain.plugins.portmap.plan import SKELETON_RULES, plan_owner

    if snap is None:
        return False
    if any(len(snap.comments.get(chain, [])) < n for chain, n in SKELETON_RULES.items()):
        return False
    prev = req.require_prev_result()
    plan = plan_owner(req.network_name, req.container_id, load(req.conf), container_ips(prev, req.ifname))
    if plan.empty:
        return True
    have = snap.comments.get(dnat_chain(plan.owner))
    if have is None or any(k not in have or k not in snap.elements for k in plan.dnat_keys + plan.masq_keys):
        return False
    return not plan.masq_rules or len(snap.comments.get(masq_chain(plan.owner), [])) >= len(plan.masq_rules)


def _check(req: Request) -> Optional[str]:
    from cnichain.plugins.portmap.plugin import cmd_check

    return checked(cmd_check)(req)


def _repair(req: Request) -> None:
    from cnichain.plugins.portmap.plugin import cmd_add

    cmd_add(req)


def _undo(req: Request) -> None:
    from cnichain.plugins.portmap.plugin import cmd_del

    cmd_del(req)


def held_mappings() -> list[HeldMapping]:
    """portmap's DNAT rules as portmap itself reads them back (its own record, not a copy), in
    the namespace the caller is in."""
    from cnichain.plugins.portmap import kernel

    return kernel.listed_mappings()


def _describe(items: list[Any]) -> list[str]:
    return [f"portmap {m.protocol}/{m.host_port}" for m in items]


def _collect(network: str, container_id: str, items: list[Any]) -> list[str]:
    from cnichain.plugins.portmap import kernel
    from cnichain.plugins.portmap.names import owner_id

    if not items:
        return []
    owner = owner_id(network, container_id)
    kernel.remove_many(lambda snap: [o for o in snap.owners() if o == owner])
    return [f"removed portmap chains {', '.join(f'{m.protocol}/{m.host_port}' for m in items)}"]


STATE = PluginState(
    "portmap",
    repair=Repair(frozenset({NFT}), _applies, _check, _repair, _undo, _survey, _intact),
    leftovers=Leftovers(_describe, _collect),
)
