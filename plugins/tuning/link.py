"""Interface attributes over netlink: the only tuning module that loads pyroute2.

Every function takes an ``IPRoute`` opened by the caller with its thread inside the pod namespace,
and the caller imports this module only when a link attribute is configured (ADD/CHECK) or a
backup of link attributes exists (DEL), so sysctl-only configs never pay for pyroute2.
"""

from __future__ import annotations

from cnichain.common import netlink
from cnichain.common.errors import plugin_error
from cnichain.common.kernel_errors import reported_as
from cnichain.common.record import FrozenRecord

TYPE_CHECKING = False
if TYPE_CHECKING:  # annotations only
    from typing import Any, Optional

IFF_PROMISC = 0x100
IFF_ALLMULTI = 0x200


class LinkState(FrozenRecord):
    """The interface attributes tuning may change, as read over netlink."""

    __slots__ = _fields = ("index", "mac", "mtu", "promisc", "allmulti", "txqlen")
    index: int
    mac: str
    mtu: int
    promisc: bool
    allmulti: bool
    txqlen: int

    def __init__(self, index: int, mac: str, mtu: int, promisc: bool, allmulti: bool, txqlen: int) -> None:
        self._assign(index, mac, mtu, promisc, allmulti, txqlen)


def read(ipr: Any, ifname: str) -> Optional[LinkState]:
    """The interface's current attributes, or None when there is no such interface."""
    index = netlink.link_index(ipr, ifname)
    if index is None:
        return None
    msg = ipr.get_links(index)[0]
    flags = int(msg["flags"])
    return LinkState(
        index=index,
        mac=str(msg.get("address") or "").lower(),
        mtu=int(msg.get("mtu") or 0),
        promisc=bool(flags & IFF_PROMISC),
        allmulti=bool(flags & IFF_ALLMULTI),
        txqlen=int(msg.get("txqlen") or 0),
    )


def require(ipr: Any, ifname: str) -> LinkState:
    state = read(ipr, ifname)
    if state is None:
        raise plugin_error(f'failed to get "{ifname}": Link not found')
    return state


def _set(ipr: Any, what: str, ifname: str, **attrs: Any) -> None:
    with reported_as(f'failed to set {what} of "{ifname}"', go=False):
        ipr.link("set", **attrs)


def _flag(ipr: Any, index: int, ifname: str, what: str, flag: int, on: bool) -> None:
    _set(ipr, what, ifname, index=index, flags=flag if on else 0, change=flag)


def apply(ipr: Any, state: LinkState, ifname: str, changes: dict[str, Any]) -> None:
    """Apply ``changes`` (backup-file keys) in the reference's order: MAC, promisc, MTU, allmulti,
    txqueuelen.  Each attribute is set only if it differs, which keeps DEL and re-ADD cheap."""
    idx = state.index
    if changes.get("mac") and str(changes["mac"]).lower() != state.mac:
        _set(ipr, "MAC", ifname, index=idx, address=str(changes["mac"]).lower())
    if changes.get("promisc") is not None and bool(changes["promisc"]) != state.promisc:
        _flag(ipr, idx, ifname, "promiscuous mode", IFF_PROMISC, bool(changes["promisc"]))
    if changes.get("mtu") and int(changes["mtu"]) != state.mtu:
        _set(ipr, "MTU", ifname, index=idx, mtu=int(changes["mtu"]))
    if changes.get("allmulti") is not None and bool(changes["allmulti"]) != state.allmulti:
        _flag(ipr, idx, ifname, "all-multicast mode", IFF_ALLMULTI, bool(changes["allmulti"]))
    if changes.get("txQLen") is not None and int(changes["txQLen"]) != state.txqlen:
        _set(ipr, "tx queue length", ifname, index=idx, txqlen=int(changes["txQLen"]))


def snapshot(state: LinkState, wanted: dict[str, Any]) -> dict[str, Any]:
    """The current values of exactly the attributes ``wanted`` changes (the backup's content)."""
    current = {
        "mac": state.mac,
        "promisc": state.promisc,
        "mtu": state.mtu,
        "allmulti": state.allmulti,
        "txQLen": state.txqlen,
    }
    return {k: current[k] for k in wanted}
