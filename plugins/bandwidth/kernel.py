"""Every kernel touch of the bandwidth plugin: links, qdiscs and filters over plain rtnetlink.

Three layouts (plan.choose_layout picks one); the pieces, on either side of the pod's link:

* host veth root TBF ``1:`` (traffic into the pod), as the reference;
* host veth ``ffff:`` ingress qdisc + redirect to an IFB in the host namespace (traffic out of the
  pod), as the reference -- layout ``host`` only;
* pod interface root TBF ``1:`` (traffic out of the pod: what the pod transmits);
* pod interface ``clsact`` + the same match-all redirect on its ingress hook to an IFB in the
  pod's namespace (traffic into the pod) -- layout ``pod`` only.  clsact rather than the legacy
  ``ingress`` qdisc, so another tool's later ``tc qdisc replace ... clsact`` still works.

The reference's layout in detail, identical so either implementation can check or tear down the
other's:

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
from .plan import AqmParams, TbfParams

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any, Iterable, Optional

    from cnichain.common.rtnl import Link

TC_H_ROOT = 0xFFFFFFFF
TC_H_INGRESS = 0xFFFFFFF1  # = TC_H_CLSACT: one ingress or clsact qdisc per device
CLSACT_INGRESS = 0xFFFFFFF2  # filter parent: clsact's ingress hook
CLSACT_EGRESS = 0xFFFFFFF3
TBF_HANDLE = 0x00010000  # 1:
INGRESS_HANDLE = 0xFFFF0000  # ffff:
TBF_CLASS = TBF_HANDLE | 1  # 1:1, the TBF's one class: where its child qdisc hangs
AQM_HANDLE = 0x00100000  # 10:
AQM_KIND = "fq_codel"
# How a kernel without fq_codel refuses it: ENOENT ("Specified qdisc kind is unknown"), or
# EOPNOTSUPP where the kind exists but cannot be a child here.
AQM_NOT_OFFERED = (errno.ENOENT, errno.EOPNOTSUPP)
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


def add_aqm(host: Any, index: int, params: AqmParams) -> bool:
    """fq_codel with ``params`` as the child of the root TBF on ``index`` (``tc qdisc add dev
    <index> parent 1:1 handle 10: fq_codel ...``); False, with the TBF keeping its own FIFO, when
    the kernel refuses the kind.  Deleting the TBF deletes it."""
    try:
        host.rtnl.request(tc.RTM_NEWQDISC, rtnl.NLM_F_CREATE | rtnl.NLM_F_EXCL,
                          tc.fq_codel(index, AQM_HANDLE, TBF_CLASS, params))
    except failures() as exc:
        if netlink.netlink_errno(exc) in AQM_NOT_OFFERED:
            return False
        raise KernelError.of(exc, "create aqm qdisc") from None
    return True


def add_ingress_qdisc(host: Any, index: int) -> None:
    try:
        host.rtnl.request(tc.RTM_NEWQDISC, rtnl.NLM_F_CREATE | rtnl.NLM_F_EXCL,
                          tc.qdisc(index, INGRESS_HANDLE, TC_H_INGRESS, "ingress"))
    except failures() as exc:
        raise KernelError.of(exc, "create ingress qdisc") from None


def add_redirect(host: Any, index: int, ifb_index: int, parent: int = INGRESS_HANDLE) -> None:
    """Match-all u32 filter under ``parent`` (the ingress qdisc's ``ffff:`` by default)
    redirecting every packet to the IFB's egress."""
    try:
        host.rtnl.request(tc.RTM_NEWTFILTER, rtnl.NLM_F_CREATE | rtnl.NLM_F_EXCL,
                          tc.u32_redirect(index, parent, FILTER_PRIO, ETH_P_ALL, FLOWID, ifb_index))
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


Qdisc = namedtuple("Qdisc", "kind handle parent tbf aqm", defaults=(None, None))


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
        params, aqm = None, None
        if kind == "tbf":
            decoded = tc.tbf_params(found)
            if decoded is not None:
                params = TbfParams(*decoded)
        elif kind == AQM_KIND:
            child = tc.fq_codel_params(found)
            if child is not None:
                aqm = AqmParams(*child)
        out.append(Qdisc(kind=kind, handle=handle, parent=parent, tbf=params, aqm=aqm))
    return out


def root_tbf(host: Any, index: int) -> Optional[Qdisc]:
    for q in qdiscs(host, index):
        if q.kind == "tbf" and q.parent == TC_H_ROOT:
            return q
    return None


def tbf_child(host: Any, index: int) -> Optional[Qdisc]:
    """The qdisc grafted under the root TBF's class on ``index``; None for the TBF's own FIFO
    (the kernel does not list that one)."""
    return next((q for q in qdiscs(host, index) if q.parent == TBF_CLASS), None)


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


# -- who else uses the host veth ------------------------------------------------------------------

def host_side(host: Any, veth: Optional[Link], why: str = "", own_root: Optional[TbfParams] = None) -> Any:
    """plan.HostVeth for ``veth`` (None: no host veth, ``why`` says why): one qdisc dump, plus a
    tcx query when no ``ffff:`` qdisc is there (tcx programs have no qdisc to show).

    A root TBF ``1:`` with exactly ``own_root`` (the parameters this ADD is about to write) is
    this attachment's own, left by an ADD of the same request that was killed before it answered:
    not another tool's root, so ADD builds the same layout again (its EEXIST then redoes the
    shaping) instead of moving everything into the pod over a TBF nobody would remove."""
    from .plan import HostVeth

    if veth is None:
        return HostVeth(False, why=why)
    hook = root = None
    for q in qdiscs(host, veth.index):
        if q.parent == TC_H_INGRESS:
            hook = q
        elif q.parent == TC_H_ROOT:
            root = q
    reasons = []
    if hook is not None:
        reasons.append(f"the ingress hook of {veth.name} is held by a {hook.kind} qdisc")
    else:
        attached = tcx_programs(veth.index)
        if attached:
            reasons.append(f"{veth.name} has tcx programs ({', '.join(attached)})")
    hooks_owned = bool(reasons)
    own = (root is not None and own_root is not None and root.kind == "tbf" and root.handle == TBF_HANDLE
           and root.tbf == own_root)
    root_owned = root is not None and root.handle != 0 and not own  # a default root qdisc has handle 0:
    if root is not None and root_owned:
        reasons.append(f"the root of {veth.name} is held by a {root.kind} qdisc")
    return HostVeth(True, hooks_owned=hooks_owned, root_owned=root_owned, why="; ".join(reasons))


BPF_PROG_QUERY = 16
BPF_TCX = (("ingress", 46), ("egress", 47))  # BPF_TCX_INGRESS, BPF_TCX_EGRESS
_BPF_SYSCALL = {"x86_64": 321, "aarch64": 280, "armv7l": 386, "ppc64le": 361, "s390x": 351, "riscv64": 280}


def tcx_programs(index: int) -> list[str]:
    """The directions of link ``index`` (in the caller's namespace) with tcx programs attached.

    BPF_PROG_QUERY on the ifindex, counting only; a kernel without tcx (before 6.6) or a refused
    query reads as none -- then nothing can be attached that way either.
    """
    import ctypes
    import os
    import struct

    nr = _BPF_SYSCALL.get(os.uname().machine)
    if nr is None:
        return []
    libc = ctypes.CDLL(None, use_errno=True)
    out = []
    for direction, attach_type in BPF_TCX:
        # union bpf_attr, its query member: target_ifindex, attach_type, query_flags,
        # attach_flags, prog_ids, count (+pad), prog_attach_flags, link_ids, link_attach_flags, revision
        buf = ctypes.create_string_buffer(struct.pack("=IIIIQI4xQQQQ", index, attach_type, 0, 0, 0, 0, 0, 0, 0, 0))
        if libc.syscall(nr, BPF_PROG_QUERY, buf, ctypes.sizeof(buf) - 1) != 0:
            continue
        if struct.unpack_from("=I", buf.raw, 24)[0]:
            out.append(direction)
    return out


# -- the pod's side --------------------------------------------------------------------------------

def add_clsact(ns: Any, index: int) -> bool:
    """A clsact qdisc on link ``index``; True when this call created it, False when one was there.

    A legacy ``ingress`` qdisc there is another tool's: refused with the kernel's EEXIST.
    """
    try:
        ns.rtnl.request(tc.RTM_NEWQDISC, rtnl.NLM_F_CREATE | rtnl.NLM_F_EXCL,
                        tc.qdisc(index, INGRESS_HANDLE, TC_H_INGRESS, "clsact"))
        return True
    except failures() as exc:
        if netlink.netlink_errno(exc) == errno.EEXIST and any(
                q.kind == "clsact" for q in qdiscs(ns, index) if q.parent == TC_H_INGRESS):
            return False
        raise KernelError.of(exc, "create clsact qdisc") from None


def add_pod_redirect(ns: Any, index: int, ifb_index: int) -> None:
    """The match-all redirect to the IFB, on clsact's ingress hook of link ``index``."""
    add_redirect(ns, index, ifb_index, CLSACT_INGRESS)


def filter_redirects(ns: Any, index: int, parent: int) -> list[tuple[int, str, list[int]]]:
    """(prio, kind, mirred egress redirect targets) of each filter under ``parent`` of ``index``."""
    try:
        msgs = ns.rtnl.dump(tc.RTM_GETTFILTER, tc.tcmsg(index, 0, parent))
    except failures() as exc:
        if netlink.is_gone(exc) or netlink.netlink_errno(exc) == errno.EINVAL:
            return []
        raise
    out = []
    for msg in msgs:
        found = tc.tc_attrs(msg)
        kind = tc.kind_of(found)
        if kind:  # the kernel also sends one header per prio without options
            out.append((tc.tc_prio(msg), kind, tc.mirred_redirects(found) if kind == "u32" else []))
    return out


def delete_filters(ns: Any, index: int, parent: int, prio: int, kind: str) -> bool:
    try:
        ns.rtnl.request(tc.RTM_DELTFILTER, 0, tc.filter_at(index, parent, prio, ETH_P_ALL, kind))
    except failures() as exc:
        code = netlink.netlink_errno(exc)
        if code in netlink.GONE or code == errno.EINVAL:
            return False
        raise
    return True


def remove_pod_shaping(pod: Any, link: Link, ifb_name: str) -> list[str]:
    """Undo what ADD put on the pod's interface and into its namespace; what was removed.

    Root TBF ``1:`` (as on the host veth); our redirect on clsact's ingress hook: the u32 filters
    at our prio whose every redirect goes to our IFB or to a device gone since (ifindex 0); the
    clsact qdisc only when no filter of anybody is left on either of its hooks; the IFB.
    """
    removed = []
    present = qdiscs(pod, link.index)
    if any(q.kind == "tbf" and q.parent == TC_H_ROOT and q.handle == TBF_HANDLE for q in present):
        if delete_qdisc(pod, link.index, TBF_HANDLE, TC_H_ROOT, "tbf"):
            removed.append(f"tbf on {link.name}")
    ifb = get_link(pod, name=ifb_name)
    if any(q.kind == "clsact" and q.parent == TC_H_INGRESS for q in present):
        ours = {0} | ({ifb.index} if ifb is not None else set())
        for prio, kind, targets in filter_redirects(pod, link.index, CLSACT_INGRESS):
            if prio == FILTER_PRIO and kind == "u32" and targets and set(targets) <= ours:
                if delete_filters(pod, link.index, CLSACT_INGRESS, prio, kind):
                    removed.append(f"redirect on {link.name}")
        if not filter_redirects(pod, link.index, CLSACT_INGRESS) and not filter_redirects(pod, link.index, CLSACT_EGRESS):
            if delete_qdisc(pod, link.index, INGRESS_HANDLE, TC_H_INGRESS, "clsact"):
                removed.append(f"clsact on {link.name}")
    if ifb is not None and ifb.kind == "ifb":
        delete_link(pod, ifb.index)
        removed.append(f"{ifb_name} in the pod")
    return removed


def pod_redirect_targets(pod: Any, index: int) -> list[int]:
    """Where the u32 filters at our prio on clsact's ingress hook of ``index`` redirect to."""
    return [t for prio, kind, targets in filter_redirects(pod, index, CLSACT_INGRESS)
            if prio == FILTER_PRIO and kind == "u32" for t in targets]
