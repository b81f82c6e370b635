"""What our plugins hold in the kernel of a node namespace, read back without any runtime's help.

Each plugin's state is read by that plugin's own ``state.py`` (the readers it checks and repairs
with), so this view sees exactly what the plugin wrote and reads itself: portmap's DNAT rules
named by the identity rule of each chain, bridge's masquerade rules named by their comments,
bandwidth's IFBs, their TBF and the host veths redirecting to them, and what it keeps in a pod's
namespace.  Here is only where each read happens and what a failed read means for the view.

Every read happens with the calling thread inside ``node_netns`` (None: the caller's namespace):
libnftables and netlink bind a socket to the namespace it is created in, and the plugins' readers
open theirs where they are called.
"""

from __future__ import annotations

from typing import Optional

from cnichain.common import netns as netns_mod

TYPE_CHECKING = False
if TYPE_CHECKING:
    from cnichain.plugins.bandwidth.state import Shaping
    from cnichain.plugins.bridge.state import Masquerade
    from cnichain.plugins.portmap.listing import HeldMapping


class _in_netns:
    """``netns.entered`` when a path is given, else nothing (the caller's namespace)."""

    def __init__(self, path: Optional[str]) -> None:
        self.inner = netns_mod.entered(path) if path else None

    def __enter__(self) -> None:
        if self.inner is not None:
            self.inner.__enter__()

    def __exit__(self, *exc: object) -> None:
        if self.inner is not None:
            self.inner.__exit__(*exc)


def portmap_mappings(node_netns: Optional[str]) -> list[HeldMapping]:
    from cnichain.plugins.portmap import state

    with _in_netns(node_netns):
        return state.held_mappings()


def masquerades(node_netns: Optional[str]) -> list[Masquerade]:
    from cnichain.plugins.bridge import state

    with _in_netns(node_netns):
        return state.masquerades()


def shapings(node_netns: Optional[str]) -> tuple[list[Shaping], dict[str, dict]]:
    from cnichain.plugins.bandwidth import state

    return state.shapings(node_netns)


def pod_shaping(netns_path: str, ifname: str, ifb: str) -> dict:
    """bandwidth's state in a pod's namespace; {} when none, or when the namespace cannot be
    entered (gone meanwhile, or not a namespace: the view says what it can)."""
    from cnichain.plugins.bandwidth import state

    try:
        return state.pod_shaping(netns_path, ifname, ifb)
    except Exception:  # noqa: BLE001
        return {}
