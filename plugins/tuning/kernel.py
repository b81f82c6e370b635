"""Every write tuning makes: interface attributes over netlink, sysctls, the backup file.

Link functions take a plain rtnetlink socket (common.netlink.route_socket) opened by the caller with
its thread inside the pod namespace, and send ``ip link set``'s own requests on it; netlink is
opened only when a link attribute is configured (ADD/CHECK) or a backup of link attributes exists
(DEL), and pyroute2 is never loaded.  Sysctls are
files under /proc/sys written with the thread inside the pod namespace.

The backup file is written 0600 through a temporary file and a rename (its directory 0700), so a
crash never leaves a half-written backup that DEL would misread.
"""

from __future__ import annotations

import os

from cnichain.common import atomic, leanjson, sysctl
from cnichain.common.errors import CniError, plugin_error
from cnichain.common.kernel_errors import KernelError, reported_as
from cnichain.common.record import FrozenRecord

TYPE_CHECKING = False
if TYPE_CHECKING:  # annotations only
    from typing import Any, Optional

IFF_PROMISC = 0x100
IFF_ALLMULTI = 0x200


class LinkState(FrozenRecord):
    """The interface attributes tuning may change, as read over netlink."""

    index: int
    mac: str
    mtu: int
    promisc: bool
    allmulti: bool
    txqlen: int


def read(ipr: Any, ifname: str) -> Optional[LinkState]:
    """The interface's current attributes, or None when there is no such interface."""
    from cnichain.common import netlink  # contextlib: not for sysctl-only configs

    link = netlink.get_link(ipr, name=ifname)
    if link is None:
        return None
    return LinkState(
        index=link.index,
        mac=link.mac.lower(),
        mtu=link.mtu,
        promisc=bool(link.flags & IFF_PROMISC),
        allmulti=bool(link.flags & IFF_ALLMULTI),
        txqlen=link.txqlen,
    )


def require(ipr: Any, ifname: str) -> LinkState:
    state = read(ipr, ifname)
    if state is None:
        raise plugin_error(f'failed to get "{ifname}": Link not found')
    return state


def _set(ipr: Any, what: str, ifname: str, body: bytes) -> None:
    from cnichain.common import rtnl

    with reported_as(f'failed to set {what} of "{ifname}"', go=False):
        ipr.rtnl.request(rtnl.RTM_NEWLINK, 0, body)


def _flag(ipr: Any, index: int, ifname: str, what: str, flag: int, on: bool) -> None:
    from cnichain.common.rtnl import link_change

    _set(ipr, what, ifname, link_change(index, flags=flag if on else 0, change=flag))


def apply(ipr: Any, state: LinkState, ifname: str, changes: dict[str, Any]) -> None:
    """Apply ``changes`` (backup-file keys) in the reference's order: MAC, promisc, MTU, allmulti,
    txqueuelen.  Each attribute is set only if it differs, which keeps DEL and re-ADD cheap."""
    from cnichain.common.rtnl import link_change

    idx = state.index
    if changes.get("mac") and str(changes["mac"]).lower() != state.mac:
        _set(ipr, "MAC", ifname, link_change(idx, mac=str(changes["mac"]).lower()))
    if changes.get("promisc") is not None and bool(changes["promisc"]) != state.promisc:
        _flag(ipr, idx, ifname, "promiscuous mode", IFF_PROMISC, bool(changes["promisc"]))
    if changes.get("mtu") and int(changes["mtu"]) != state.mtu:
        _set(ipr, "MTU", ifname, link_change(idx, mtu=int(changes["mtu"])))
    if changes.get("allmulti") is not None and bool(changes["allmulti"]) != state.allmulti:
        _flag(ipr, idx, ifname, "all-multicast mode", IFF_ALLMULTI, bool(changes["allmulti"]))
    if changes.get("txQLen") is not None and int(changes["txQLen"]) != state.txqlen:
        _set(ipr, "tx queue length", ifname, link_change(idx, txqlen=int(changes["txQLen"])))


# -- sysctls ------------------------------------------------------------------------------------


def os_error(op: str, path: str, exc: OSError) -> CniError:
    """Go's ``*os.PathError`` wording: ``open /proc/sys/...: no such file or directory``."""
    return KernelError.of(exc, f"{op} {path}")


def write_sysctl(path: str, value: str) -> None:
    try:
        sysctl.write(path, value)
    except OSError as exc:
        raise os_error("write", path, exc) from None


def restore_sysctl(path: str, old: str, new: str) -> bool:
    """Put ``old`` back while the sysctl still holds ``new`` (what tuning wrote); False when it
    belongs to an interface that is gone.  A later change by someone else wins."""
    try:
        if sysctl.read(path).split() == new.split():
            sysctl.write(path, old)
    except FileNotFoundError:
        return False
    return True


# -- the backup file ----------------------------------------------------------------------------


def save_backup(path: str, data: dict) -> None:
    """Write the pre-ADD values atomically (temp file + rename, :mod:`cnichain.common.atomic`),
    without ``fsync``.

    The rename is what a killed plugin needs: the file is whole or absent, never half written.
    An fsync would only protect it against a power loss -- after which the pod's namespace and
    every value it records are gone too, and a DEL without a backup file is a no-op, as in the
    reference -- at ~3 ms per warm ADD on a disk-backed /var/lib, more than the sysctl writes.
    """
    directory = os.path.dirname(path)
    try:
        os.makedirs(directory, mode=0o700, exist_ok=True)
    except OSError as exc:
        raise plugin_error(f"failed to create backup directory: {exc.strerror}: {directory}") from None
    try:
        atomic.write_file(path, leanjson.dumps(data, indent=1, sort_keys=True).encode(), 0o600)
    except OSError as exc:
        raise plugin_error(f"failed to save file {os.path.basename(path)}: {exc.strerror}") from None


def remove_backup(path: str) -> None:
    """The backup, and any temp sibling an ADD killed mid-write left next to it (atomic's
    ``.<name>.tmp-<pid>-<random>``): DEL is the last time anything looks at this container's
    backup, so what it does not take stays on the node for good."""
    _unlink(path)
    directory = os.path.dirname(path)
    head = atomic.default_temp_prefix(path)
    try:
        leftovers = [n for n in os.listdir(directory or ".") if n.startswith(head)]
    except FileNotFoundError:
        return
    for leftover in leftovers:
        _unlink(os.path.join(directory, leftover))


def _unlink(path: str) -> None:
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass
