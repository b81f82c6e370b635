"""Every kernel touch of the bandwidth plugin: links, qdiscs and filters over plain rtnetlink.

Layout, identical to the reference so either implementation can check or tear down the other's:

* ingress (traffic into the pod) = TBF ``1:`` as the root qdisc of the host-side veth, because
  what the host veth transmits is what the pod receives;
* egress (traffic out of the pod) = the host veth's ``ffff:`` ingress qdisc with a match-all u32
  filter (prio 1, protocol all, flowid 1:1) whose mirred action redirects every packet to an IFB
  device, and a TBF ``1:`` on that IFB.  Ingress qdiscs cannot delay packets, hence the detour.

Each function takes ``host``: a :func:`common.netlink.route_socket` (what the handlers open) or an
``IPRoute`` of common.netlink (what whole-node views hold); either way the requests go out on the
plain rtnetlink socket it carries (``.rtnl``), packed by :mod:`.tc`.  So this plugin never loads
pyroute2 (~0.1 s of every cold exec) and a warm request pays ~20 µs of Python per kernel request
instead of ~0.3 ms.  TBF messages carry exactly the plan's buffer and limit and the 64-bit rate
attribute from 2^32 bytes/s, as the reference sends them.
"""

from __future__ import annotations

import errno
from collections import namedtuple

from cnichain.common import netlink, rtnl
from cnichain.common.errors import plugin_error
from cnichain.common.kernel_errors import KernelError, failures

from . import tc
from .plan import TbfParams

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any, Iterable, Optional

    from cnichain.common.rtnl import Link

TC_H_ROOT = 0xFFFFFFFF
TC_H_INGRESS = 0xFFFFFFF1
TBF_HANDLE = 0x00010000  # 1:
INGRESS_HANDLE = 0xFFFF0000  # ffff:
FLOWID = 0x00010001  # 1:1
ETH_P_ALL = 0x0003
FILTER_PRIO = 1
MIRRED_EGRESS_REDIRECT = 1
IFB_ALIAS_PREFIX = "cnichain-bandwidth"


def _link(msg: Any) -> Link:
    return netlink.link_of(msg)


def get_link(ipr: Any, *, name: str = "", index: int = 0) -> Optional[Link]:
    """The link by name or index in ``ipr``'s namespace, or None when there is none."""
    return netlink.get_link(ipr, name=name, index=index)


# -- finding the pod's host-side veth ---------------------------------------------------------

def veth_peer_index(netns_path: str, ifname: str) -> int:
    """The host-side ifindex of the pod's veth ``ifname`` (IFLA_LINK read inside the pod)."""
    link = netlink.get_link_in(netns_path, name=ifname)
    if link is None:
        raise plugin_error(f"container interface {ifname} has no veth peer: Link not found")
    if link.kind != "veth":
        raise plugin_error(
            f'container interface {ifname} has no veth peer: interface "{ifname}" was not a veth interface'
        )
    if link.peer <= 0:
        raise plugin_error(f"container interface {ifname} has no veth peer: no peer index")
    return link.peer


def host_veth_by_peer(host: Any, peer_index: int) -> Link:
    link = get_link(host, index=peer_index)
    if link is None or link.kind != "veth":
        raise plugin_error(f"veth peer with index {peer_index} is not in host ns")
    return link


# -- links -----------------------------------------------------------------------------------

def create_ifb(host: Any, name: str, mtu: int) -> Link:
    """The IFB device, still down, with the host veth's MTU and no transmit queue of its own.

    It stays down until :func:`ifb_up`: a qdisc grafted onto a device that is up first makes the
    kernel quiesce the device (an RCU synchronisation, about a millisecond here), so the caller puts
    the TBF on while it is down.  Nothing is redirected to the IFB before it is up and shaped.
    """
    try:
        host.rtnl.request(rtnl.RTM_NEWLINK, rtnl.NLM_F_CREATE | rtnl.NLM_F_EXCL, tc.new_ifb(name, mtu or 1500))
        link = get_link(host, name=name)
    except failures() as exc:
        raise KernelError.of(exc, "adding link") from None
    if link is None:
        raise plugin_error(f"adding link: {name} vanished after creation")
    return link


def ifb_up(host: Any, ifb: Link, alias: str) -> None:
    """Bring the IFB up and tag it with our alias, in one change request.

    The kernel ignores IFLA_IFALIAS on creation; it is only applied by a change request.
    """
    try:
        host.rtnl.request(rtnl.RTM_NEWLINK, 0, tc.link_up_with_alias(ifb.index, alias[:255]))
    except failures() as exc:
        raise KernelError.of(exc, "adding link") from None


def delete_link(host: Any, index: int) -> None:
    try:
        host.rtnl.request(rtnl.RTM_DELLINK, 0, tc.link_index_only(index))
    except failures() as exc:
        if not netlink.is_gone(exc):
            raise


def ifb_links(host: Any) -> list[Link]:
    """All IFB devices of the namespace (for GC)."""
    return [link for link in host.rtnl.links() if link.kind == "ifb"]


def veth_links(host: Any) -> list[Link]:
    """All veths of the namespace (a node view looks for TBFs on them)."""
    return [link for link in map(_link, host.get_links()) if link.kind == "veth"]


def ifb_alias(network: str, container_id: str) -> str:
    """The alias that marks an IFB as ours and names its attachment (the kernel keeps 255 bytes)."""
    return f"{IFB_ALIAS_PREFIX} net={network} id={container_id}"[:255]


def alias_owner(alias: str) -> Optional[tuple[str, str]]:
    """(network, container ID) an :func:`ifb_alias` names; None for any other alias."""
    head = f"{IFB_ALIAS_PREFIX} net="
    if not alias.startswith(head):
        return None
    network, sep, container_id = alias[len(head):].partition(" id=")
    if not (sep and network and container_id) or " " in network or " " in container_id:
        return None
    return network, container_id


# -- qdiscs ----------------------------------------------------------------------------------

def add_tbf(host: Any, index: int, params: TbfParams) -> None:
    """``tc qdisc add dev <index> root handle 1: tbf`` with exactly ``params``."""
    try:
        host.rtnl.request(tc.RTM_NEWQDISC, rtnl.NLM_F_CREATE | rtnl.NLM_F_EXCL,
                          tc.tbf(index, TBF_HANDLE, TC_H_ROOT, params))
    except failures() as exc:
        raise KernelError.of(exc, "create qdisc") from None


def add_ingress_qdisc(host: Any, index: int) -> None:
    try:
        host.rtnl.request(tc.RTM_NEWQDISC, rtnl.NLM_F_CREATE | rtnl.NLM_F_EXCL,
                          tc.qdisc(index, INGRESS_HANDLE, TC_H_INGRESS, "ingress"))
    except failures() as exc:
        raise KernelError.of(exc, "create ingress qdisc") from None


def add_redirect(host: Any, index: int, ifb_index: int) -> None:
    """Match-all u32 filter on ``ffff:`` redirecting every packet to the IFB's egress."""
    try:
        host.rtnl.request(tc.RTM_NEWTFILTER, rtnl.NLM_F_CREATE | rtnl.NLM_F_EXCL,
                          tc.u32_redirect(index, INGRESS_HANDLE, FILTER_PRIO, ETH_P_ALL, FLOWID, ifb_index))
    except failures() as exc:
        raise KernelError.of(exc, "add filter") from None


def delete_qdisc(host: Any, index: int, handle: int, parent: int, kind: str = "") -> bool:
    """Remove one qdisc; False when it (or the link) was already gone or is not the one described.

    With ``kind`` the kernel itself refuses (EINVAL) to delete a qdisc of another type or handle
    at that place, so "delete our root TBF if it is there" is one request instead of a dump first.
    """
    try:
        host.rtnl.request(tc.RTM_DELQDISC, 0, tc.qdisc(index, handle, parent, kind))
    except failures() as exc:
        code = netlink.netlink_errno(exc)
        if code in netlink.GONE or code == errno.EINVAL:
            return False
        raise
    return True


Qdisc = namedtuple("Qdisc", "kind handle parent tbf", defaults=(None,))


def _qdisc_dump(host: Any) -> list[bytes]:
    """Every qdisc of the namespace (the kernel lists them all; callers pick by ifindex)."""
    return host.rtnl.dump(tc.RTM_GETQDISC, tc.tcmsg(0))


def qdiscs(host: Any, index: int) -> list[Qdisc]:
    """The qdiscs on link ``index``, with TBF parameters decoded (64-bit rate included)."""
    out = []
    try:
        msgs = _qdisc_dump(host)
    except failures() as exc:
        if netlink.is_gone(exc):
            return []
        raise
    for msg in msgs:
        at, handle, parent = tc.tc_header(msg)
        if at != index:
            continue
        found = tc.tc_attrs(msg)
        kind = tc.kind_of(found)
        params = None
        if kind == "tbf":
            decoded = tc.tbf_params(found)
            if decoded is not None:
                rate, buffer, limit = decoded
                params = TbfParams(rate=rate, buffer=buffer, limit=limit)
        out.append(Qdisc(kind=kind, handle=handle, parent=parent, tbf=params))
    return out


def root_tbf(host: Any, index: int) -> Optional[Qdisc]:
    for q in qdiscs(host, index):
        if q.kind == "tbf" and q.parent == TC_H_ROOT:
            return q
    return None


def has_ingress_qdisc(host: Any, index: int) -> bool:
    return any(q.kind == "ingress" and q.handle == INGRESS_HANDLE for q in qdiscs(host, index))


def redirect_targets(host: Any, index: int) -> list[int]:
    """Ifindexes that u32 filters on ``ffff:`` of link ``index`` redirect to (mirred egress)."""
    out: list[int] = []
    try:
        msgs = host.rtnl.dump(tc.RTM_GETTFILTER, tc.tcmsg(index, 0, INGRESS_HANDLE))
    except failures() as exc:
        if netlink.is_gone(exc) or netlink.netlink_errno(exc) == errno.EINVAL:
            return []
        raise
    for msg in msgs:
        found = tc.tc_attrs(msg)
        if tc.kind_of(found) == "u32":
            out.extend(tc.mirred_redirects(found))
    return out


def remove_shaping(host: Any, veth: Link, ifb_index: Optional[int]) -> list[str]:
    """Undo what ADD put on ``veth``; returns what was removed (for the log).

    The root TBF ``1:`` is removed as ours (one delete request naming handle and kind: the kernel
    refuses it when the root qdisc is anything else).  The ``ffff:`` ingress qdisc is removed only
    when one of its filters redirects to our IFB, so a foreign ingress qdisc on the link survives.
    """
    removed = []
    if delete_qdisc(host, veth.index, TBF_HANDLE, TC_H_ROOT, "tbf"):
        removed.append(f"tbf on {veth.name}")
    if ifb_index is not None and ifb_index in redirect_targets(host, veth.index):
        if delete_qdisc(host, veth.index, INGRESS_HANDLE, TC_H_INGRESS):
            removed.append(f"ingress qdisc on {veth.name}")
    return removed


def iter_candidates(host: Any, names: Iterable[str]) -> list[Link]:
    """Existing veths among ``names`` (host-side interfaces listed in a prevResult)."""
    out = []
    for name in names:
        link = get_link(host, name=name)
        if link is not None and link.kind == "veth":
            out.append(link)
    return out


def veths_redirecting_to(host: Any, ifb_index: int) -> list[Link]:
    """Host veths whose ingress filters redirect to ``ifb_index``.

    Used when neither the pod namespace nor prevResult names the veth: one dump of all qdiscs,
    then filter dumps only for the few links that carry an ingress qdisc.
    """
    with_ingress = sorted({
        tc.tc_header(msg)[0] for msg in _qdisc_dump(host)
        if tc.kind_of(tc.tc_attrs(msg)) == "ingress"
    })
    out = []
    for index in with_ingress:
        if ifb_index in redirect_targets(host, index):
            link = get_link(host, index=index)
            if link is not None and link.kind == "veth":
                out.append(link)
    return out
