"""Every kernel touch of the bandwidth plugin: links, qdiscs and filters through pyroute2.

Layout, identical to the reference so either implementation can check or tear down the other's:

* ingress (traffic into the pod) = TBF ``1:`` as the root qdisc of the host-side veth, because
  what the host veth transmits is what the pod receives;
* egress (traffic out of the pod) = the host veth's ``ffff:`` ingress qdisc with a match-all u32
  filter (prio 1, protocol all, flowid 1:1) whose mirred action redirects every packet to an IFB
  device, and a TBF ``1:`` on that IFB.  Ingress qdiscs cannot delay packets, hence the detour.

pyroute2 is imported lazily (via common.netlink) so config errors and no-op paths never pay for it.
TBF messages are built here rather than through ``IPRoute.tc`` because pyroute2's TBF encoder has no
64-bit rate attribute (rates from ~34.4 Gbit/s up) and recomputes buffer/limit with its own rounding.
"""

from __future__ import annotations

import errno
from collections import namedtuple

from cnichain.common import netlink
from cnichain.common.errors import plugin_error
from cnichain.common.kernel_errors import KernelError, failures

from .plan import UINT32_MAX, TbfParams

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any, Iterable, Optional

TC_H_ROOT = 0xFFFFFFFF
TC_H_INGRESS = 0xFFFFFFF1
TBF_HANDLE = 0x00010000  # 1:
INGRESS_HANDLE = 0xFFFF0000  # ffff:
FLOWID = 0x00010001  # 1:1
ETH_P_ALL = 0x0003
FILTER_PRIO = 1
MIRRED_EGRESS_REDIRECT = 1
IFB_ALIAS_PREFIX = "cnichain-bandwidth"


Link = namedtuple("Link", "index name mtu mac kind alias", defaults=(0, "", "", ""))


def _link(msg: Any) -> Link:
    return Link(
        index=int(msg["index"]),
        name=str(msg.get_attr("IFLA_IFNAME") or ""),
        mtu=int(msg.get_attr("IFLA_MTU") or 0),
        mac=str(msg.get_attr("IFLA_ADDRESS") or ""),
        kind=str(msg.get_nested("IFLA_LINKINFO", "IFLA_INFO_KIND") or ""),
        alias=str(msg.get_attr("IFLA_IFALIAS") or ""),
    )


def get_link(ipr: Any, *, name: str = "", index: int = 0) -> Optional[Link]:
    """The link by name or index in ``ipr``'s namespace, or None when there is none."""
    try:
        msgs = ipr.link("get", ifname=name) if name else ipr.link("get", index=index)
    except failures() as exc:
        if netlink.is_gone(exc):
            return None
        raise
    return _link(msgs[0]) if msgs else None


# -- finding the pod's host-side veth ---------------------------------------------------------

def veth_peer_index(netns_path: str, ifname: str) -> int:
    """The host-side ifindex of the pod's veth ``ifname`` (IFLA_LINK read inside the pod)."""
    with netlink.session(netns_path) as pod:
        try:
            msgs = pod.link("get", ifname=ifname)
        except failures() as exc:
            if netlink.is_gone(exc):
                raise plugin_error(f"container interface {ifname} has no veth peer: Link not found") from None
            raise
        msg = msgs[0]
        kind = msg.get_nested("IFLA_LINKINFO", "IFLA_INFO_KIND")
        if kind != "veth":
            raise plugin_error(
                f'container interface {ifname} has no veth peer: interface "{ifname}" was not a veth interface'
            )
        peer = int(msg.get_attr("IFLA_LINK") or 0)
    if peer <= 0:
        raise plugin_error(f"container interface {ifname} has no veth peer: no peer index")
    return peer


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
        host.link("add", ifname=name, kind="ifb", mtu=mtu or 1500, txqlen=0)
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
        host.link("set", index=ifb.index, state="up", ifalias=alias[:255])
    except failures() as exc:
        raise KernelError.of(exc, "adding link") from None


def delete_link(host: Any, index: int) -> None:
    try:
        host.link("del", index=index)
    except failures() as exc:
        if not netlink.is_gone(exc):
            raise


def ifb_links(host: Any) -> list[Link]:
    """All IFB devices of the namespace (for GC)."""
    out = []
    for msg in host.get_links():
        link = _link(msg)
        if link.kind == "ifb":
            out.append(link)
    return out


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

_TBF_MSG_CLASS = None


def _tbf_msg_class() -> Any:
    """A tcmsg whose TCA_OPTIONS is always TBF, with the 64-bit rate attribute pyroute2 lacks.

    Built once per process: a class statement plus pyroute2's compilation of its attribute tables
    on first use cost more than the netlink round trip it serves.
    """
    global _TBF_MSG_CLASS
    if _TBF_MSG_CLASS is None:
        _TBF_MSG_CLASS = _build_tbf_msg_class()
    return _TBF_MSG_CLASS


def _build_tbf_msg_class() -> Any:
    from pyroute2.netlink import nla
    from pyroute2.netlink.rtnl.tcmsg import tcmsg

    class tbf_tcmsg(tcmsg):
        # pyroute2 compiles a message class's attribute table on its first instance and marks the
        # class compiled -- a mark a subclass inherits: once any plain tcmsg was built in this
        # process (a qdisc dump: always, in a warm agent worker), this class would use tcmsg's
        # table, encode TCA_OPTIONS through pyroute2's own tbf options and compute its two
        # unused 256-entry rate tables in Python (~5 ms per ADD).  A mark of its own keeps this
        # table ours in every process, warm or cold.
        _nlmsg_base__compiled_nla = False
        nla_map = (
            ("TCA_UNSPEC", "none"),
            ("TCA_KIND", "asciiz"),
            ("TCA_OPTIONS", "tbf_options"),
        )

        class tbf_options(nla):
            nla_map = (
                ("TCA_TBF_UNSPEC", "none"),
                ("TCA_TBF_PARMS", "tbf_parms"),
                ("TCA_TBF_RTAB", "hex"),
                ("TCA_TBF_PTAB", "hex"),
                ("TCA_TBF_RATE64", "uint64"),
                ("TCA_TBF_PRATE64", "uint64"),
                ("TCA_TBF_BURST", "uint32"),
                ("TCA_TBF_PBURST", "uint32"),
                ("TCA_TBF_PAD", "hex"),
            )

            class tbf_parms(nla):
                # struct tc_tbf_qopt: two tc_ratespec, then limit, buffer, mtu
                fields = (
                    ("rate_cell_log", "B"), ("rate_linklayer", "B"), ("rate_overhead", "H"),
                    ("rate_cell_align", "h"), ("rate_mpu", "H"), ("rate", "I"),
                    ("peak_cell_log", "B"), ("peak_linklayer", "B"), ("peak_overhead", "H"),
                    ("peak_cell_align", "h"), ("peak_mpu", "H"), ("peak", "I"),
                    ("limit", "I"), ("buffer", "I"), ("mtu", "I"),
                )

    return tbf_tcmsg


def add_tbf(host: Any, index: int, params: TbfParams) -> None:
    """``tc qdisc add dev <index> root handle 1: tbf`` with exactly ``params``."""
    from pyroute2.netlink import NLM_F_ACK, NLM_F_CREATE, NLM_F_EXCL, NLM_F_REQUEST
    from pyroute2.netlink.rtnl import RTM_NEWQDISC

    options = [["TCA_TBF_PARMS", {
        "rate": min(params.rate, UINT32_MAX), "limit": params.limit, "buffer": params.buffer, "mtu": 0,
    }]]
    if params.rate > UINT32_MAX:
        options.append(["TCA_TBF_RATE64", params.rate])
    msg = _tbf_msg_class()()
    msg["index"] = index
    msg["handle"] = TBF_HANDLE
    msg["parent"] = TC_H_ROOT
    msg["attrs"] = [["TCA_KIND", "tbf"], ["TCA_OPTIONS", {"attrs": options}]]
    msg["header"]["type"] = RTM_NEWQDISC
    msg["header"]["flags"] = NLM_F_REQUEST | NLM_F_ACK | NLM_F_CREATE | NLM_F_EXCL
    try:
        host.nlm_request_batch([msg])
    except failures() as exc:
        raise KernelError.of(exc, "create qdisc") from None


def add_ingress_qdisc(host: Any, index: int) -> None:
    try:
        host.tc("add", "ingress", index, INGRESS_HANDLE)
    except failures() as exc:
        raise KernelError.of(exc, "create ingress qdisc") from None


def add_redirect(host: Any, index: int, ifb_index: int) -> None:
    """Match-all u32 filter on ``ffff:`` redirecting every packet to the IFB's egress."""
    try:
        host.tc(
            "add-filter", "u32", index,
            parent=INGRESS_HANDLE, prio=FILTER_PRIO, protocol=ETH_P_ALL, target=FLOWID,
            keys=["0x0/0x0+0"],
            action=[{"kind": "mirred", "direction": "egress", "action": "redirect", "ifindex": ifb_index}],
        )
    except failures() as exc:
        raise KernelError.of(exc, "add filter") from None


def delete_qdisc(host: Any, index: int, handle: int, parent: int, kind: str = "") -> bool:
    """Remove one qdisc; False when it (or the link) was already gone or is not the one described.

    With ``kind`` the kernel itself refuses (EINVAL) to delete a qdisc of another type or handle
    at that place, so "delete our root TBF if it is there" is one request instead of a dump first.
    """
    from pyroute2.netlink import NLM_F_ACK, NLM_F_REQUEST
    from pyroute2.netlink.rtnl import RTM_DELQDISC
    from pyroute2.netlink.rtnl.tcmsg import tcmsg

    msg = tcmsg()
    msg["index"] = index
    msg["handle"] = handle
    msg["parent"] = parent
    if kind:
        msg["attrs"] = [["TCA_KIND", kind]]
    msg["header"]["type"] = RTM_DELQDISC
    msg["header"]["flags"] = NLM_F_REQUEST | NLM_F_ACK
    try:
        host.nlm_request_batch([msg])
    except failures() as exc:
        code = netlink.netlink_errno(exc)
        if code in netlink.GONE or code == errno.EINVAL:
            return False
        raise
    return True


Qdisc = namedtuple("Qdisc", "kind handle parent tbf", defaults=(None,))


def qdiscs(host: Any, index: int) -> list[Qdisc]:
    """The qdiscs on link ``index``, with TBF parameters decoded (64-bit rate included)."""
    tbf_cls = _tbf_msg_class()
    out = []
    try:
        msgs = host.get_qdiscs(index=index)
    except failures() as exc:
        if netlink.is_gone(exc):
            return []
        raise
    for msg in msgs:
        if int(msg["index"]) != index:
            continue
        kind = str(msg.get_attr("TCA_KIND") or "")
        params = None
        if kind == "tbf":
            raw = tbf_cls(msg.data[msg.offset: msg.offset + msg["header"]["length"]])
            raw.decode()
            opts = raw.get_attr("TCA_OPTIONS")
            parms = opts.get_attr("TCA_TBF_PARMS") if opts else None
            if parms:
                rate = opts.get_attr("TCA_TBF_RATE64") or parms["rate"]
                params = TbfParams(rate=int(rate), buffer=int(parms["buffer"]), limit=int(parms["limit"]))
        out.append(Qdisc(kind=kind, handle=int(msg["handle"]), parent=int(msg["parent"]), tbf=params))
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
        msgs = host.get_filters(index=index, parent=INGRESS_HANDLE)
    except failures() as exc:
        if netlink.is_gone(exc) or netlink.netlink_errno(exc) == errno.EINVAL:
            return []
        raise
    for msg in msgs:
        if msg.get_attr("TCA_KIND") != "u32":
            continue
        opts = msg.get_attr("TCA_OPTIONS")
        acts = opts.get_attr("TCA_U32_ACT") if opts else None
        if not acts:
            continue
        for _, act in acts.get("attrs", []):  # (TCA_ACT_PRIO_n, action) pairs
            if act.get_attr("TCA_ACT_KIND") != "mirred":
                continue
            act_opts = act.get_attr("TCA_ACT_OPTIONS")
            parms = act_opts.get_attr("TCA_MIRRED_PARMS") if act_opts else None
            if parms and parms["eaction"] == MIRRED_EGRESS_REDIRECT:
                out.append(int(parms["ifindex"]))
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
        int(msg["index"]) for msg in host.get_qdiscs()
        if msg.get_attr("TCA_KIND") == "ingress"
    })
    out = []
    for index in with_ingress:
        if ifb_index in redirect_targets(host, index):
            link = get_link(host, index=index)
            if link is not None and link.kind == "veth":
                out.append(link)
    return out
