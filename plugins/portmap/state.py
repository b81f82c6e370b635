"""portmap's reconciler face: what it installed for an attachment, read back, repaired, collected.

Its state is its nftables table: the shared skeleton (chains, maps, sets), and per container
either its elements in the maps and sets (the map layout: an OWNERS element naming network and
container, an ownership and a target element per key, masquerade set elements) or, for a config
with conditions or a key another container claimed first, its DNAT and masquerade chains.

* check: its CHECK (our table, the shared chains, the container's entries in its layout);
  repaired by its ADD, whose one transaction puts back any element that is missing (its slow
  path rebuilds the skeleton and this container's chains) without touching any other
  container's, and flushes the UDP/SCTP conntrack entries of the ports;
* survey: one snapshot of the table per pass; intact: :func:`.verify.problem` finds nothing;
* leftovers: a container no cache names is removed by owner (``remove_many`` of that owner's
  entries in both layouts), never by "everything not valid".
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
    from cnichain.plugins.portmap.plan import plan_owner
    from cnichain.plugins.portmap.verify import problem

    prev = req.require_prev_result()
    plan = plan_owner(req.network_name, req.container_id, load(req.conf), container_ips(prev, req.ifname))
    return problem(snap, plan) is None


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
