"""The rtnetlink messages bandwidth sends and the answers it reads, packed with ``struct``.

Pure: bytes in, bytes or values out (common.rtnl sends them).  The layouts are the kernel's tc ABI
(``linux/pkt_sched.h``, ``linux/pkt_cls.h``, ``linux/tc_act/tc_mirred.h``) and the attribute order
is the one ``tc`` and pyroute2 use, so the kernel builds exactly the same qdiscs and filter.
"""

from __future__ import annotations

import struct

from cnichain.common.rtnl import HEADER, IFINFO, NLA_F_NESTED, U32, attrs, nested, nla, text

from .plan import UINT32_MAX

TYPE_CHECKING = False
if TYPE_CHECKING:  # annotations only
    from typing import Optional

    from .plan import AqmParams, TbfParams

RTM_NEWQDISC, RTM_DELQDISC, RTM_GETQDISC = 36, 37, 38
RTM_NEWTFILTER, RTM_DELTFILTER, RTM_GETTFILTER = 44, 45, 46
IFLA_IFNAME, IFLA_MTU, IFLA_TXQLEN, IFLA_LINKINFO, IFLA_IFALIAS = 3, 4, 13, 18, 20
IFLA_INFO_KIND = 1
IFF_UP = 0x1
TCA_KIND, TCA_OPTIONS = 1, 2
TCA_TBF_PARMS, TCA_TBF_RATE64, TCA_TBF_PRATE64 = 1, 4, 5
TCA_FQ_CODEL_TARGET, TCA_FQ_CODEL_LIMIT, TCA_FQ_CODEL_INTERVAL, TCA_FQ_CODEL_ECN = 1, 2, 3, 4
TCA_U32_CLASSID, TCA_U32_SEL, TCA_U32_ACT = 1, 5, 7
TCA_ACT_KIND, TCA_ACT_OPTIONS = 1, 2
TCA_MIRRED_PARMS = 2
TC_ACT_STOLEN = 4
TC_U32_TERMINAL = 1

TCMSG = struct.Struct("=BxxxiIII")  # struct tcmsg: family, pad, ifindex, handle, parent, info
# struct tc_tbf_qopt: two struct tc_ratespec (cell_log, linklayer, overhead, cell_align, mpu, rate),
# then limit, buffer, mtu
TBF_QOPT = struct.Struct("=BBHhHI BBHhHI III".replace(" ", ""))
MIRRED = struct.Struct("=IIiiiiI")  # struct tc_mirred: tc_gen (index, capab, action, refcnt, bindcnt), eaction, ifindex
U32_SEL = struct.Struct("=BBBxHHhhI")  # struct tc_u32_sel without keys: flags, offshift, nkeys, offmask, off, offoff, hoff, hmask
U32_KEY = struct.Struct("=IIii")  # struct tc_u32_key: mask, val, off, offmask
U64 = struct.Struct("=Q")


def tcmsg(index: int, handle: int = 0, parent: int = 0, info: int = 0) -> bytes:
    return TCMSG.pack(0, index, handle, parent, info)


def _asciiz(value: str) -> bytes:
    return value.encode() + b"\0"


# -- requests ----------------------------------------------------------------------------------

def new_ifb(name: str, mtu: int) -> bytes:
    """RTM_NEWLINK body: an IFB named ``name``, ``mtu``, no transmit queue (still down)."""
    return (IFINFO.pack(0, 0, 0, 0, 0) + nla(IFLA_IFNAME, _asciiz(name)) + nla(IFLA_MTU, U32.pack(mtu))
            + nla(IFLA_TXQLEN, U32.pack(0)) + nested(IFLA_LINKINFO, nla(IFLA_INFO_KIND, b"ifb\0")))


def link_up_with_alias(index: int, alias: str) -> bytes:
    """RTM_NEWLINK body: link ``index`` up (IFF_UP in flags and change mask) with IFLA_IFALIAS."""
    return IFINFO.pack(0, 0, index, IFF_UP, IFF_UP) + nla(IFLA_IFALIAS, _asciiz(alias))


def link_index_only(index: int) -> bytes:
    """RTM_DELLINK body."""
    return IFINFO.pack(0, 0, index, 0, 0)


def tbf(index: int, handle: int, parent: int, params: TbfParams) -> bytes:
    """RTM_NEWQDISC body: a TBF with exactly ``params`` (TCA_TBF_RATE64 and TCA_TBF_PRATE64 from
    2^32 bytes/s); with a peak rate, its bucket goes in ``mtu`` as ticks, as ``tc`` sends it."""
    parms = TBF_QOPT.pack(0, 0, 0, 0, 0, min(params.rate, UINT32_MAX), 0, 0, 0, 0, 0,
                          min(params.peakrate, UINT32_MAX), params.limit, params.buffer, params.mtu)
    options = nla(TCA_TBF_PARMS, parms)
    if params.rate > UINT32_MAX:
        options += nla(TCA_TBF_RATE64, U64.pack(params.rate))
    if params.peakrate > UINT32_MAX:
        options += nla(TCA_TBF_PRATE64, U64.pack(params.peakrate))
    return tcmsg(index, handle, parent) + nla(TCA_KIND, b"tbf\0") + nla(TCA_OPTIONS, options)


def fq_codel(index: int, handle: int, parent: int, params: AqmParams) -> bytes:
    """RTM_NEWQDISC body: fq_codel with exactly ``params`` (``tc qdisc add ... fq_codel target T
    interval I limit L ecn``), in the attribute order ``tc`` sends."""
    options = (nla(TCA_FQ_CODEL_TARGET, U32.pack(params.target_us)) + nla(TCA_FQ_CODEL_LIMIT, U32.pack(params.limit))
               + nla(TCA_FQ_CODEL_INTERVAL, U32.pack(params.interval_us))
               + nla(TCA_FQ_CODEL_ECN, U32.pack(1 if params.ecn else 0)))
    return tcmsg(index, handle, parent) + nla(TCA_KIND, b"fq_codel\0") + nla(TCA_OPTIONS, options)


def qdisc(index: int, handle: int, parent: int, kind: str = "") -> bytes:
    """RTM_NEWQDISC / RTM_DELQDISC body for a qdisc without options (``ingress``, or a delete)."""
    return tcmsg(index, handle, parent) + (nla(TCA_KIND, _asciiz(kind)) if kind else b"")


def u32_redirect(index: int, parent: int, prio: int, protocol: int, flowid: int, target: int) -> bytes:
    """RTM_NEWTFILTER body: a match-all u32 filter whose mirred action redirects to ``target``'s
    egress (``tc filter add ... u32 match u32 0 0 flowid ... action mirred egress redirect``)."""
    info = (prio << 16) | _htons(protocol)
    mirred = MIRRED.pack(0, 0, TC_ACT_STOLEN, 0, 0, MIRRED_EGRESS_REDIRECT, target)
    action = nested(1, nla(TCA_ACT_KIND, b"mirred\0"), nla(TCA_ACT_OPTIONS | NLA_F_NESTED, nla(TCA_MIRRED_PARMS, mirred)))
    selector = U32_SEL.pack(TC_U32_TERMINAL, 0, 1, 0, 0, 0, 0, 0) + U32_KEY.pack(0, 0, 0, 0)
    options = nested(TCA_U32_ACT, action) + nla(TCA_U32_CLASSID, U32.pack(flowid)) + nla(TCA_U32_SEL, selector)
    return tcmsg(index, 0, parent, info) + nla(TCA_KIND, b"u32\0") + nla(TCA_OPTIONS, options)


MIRRED_EGRESS_REDIRECT = 1


def filter_at(index: int, parent: int, prio: int, protocol: int, kind: str) -> bytes:
    """RTM_DELTFILTER body: every filter of ``kind`` at ``prio``/``protocol`` under ``parent``."""
    return tcmsg(index, 0, parent, (prio << 16) | _htons(protocol)) + nla(TCA_KIND, _asciiz(kind))


def _htons(value: int) -> int:
    return ((value & 0xFF) << 8) | ((value >> 8) & 0xFF)


# -- answers -----------------------------------------------------------------------------------

def tc_header(msg: bytes) -> tuple[int, int, int]:
    """(ifindex, handle, parent) of an RTM_NEWQDISC / RTM_NEWTFILTER message."""
    _family, index, handle, parent, _info = TCMSG.unpack_from(msg, HEADER.size)
    return index, handle, parent


def tc_prio(msg: bytes) -> int:
    """The priority of an RTM_NEWTFILTER message (upper half of tcm_info)."""
    return TCMSG.unpack_from(msg, HEADER.size)[4] >> 16


def tc_attrs(msg: bytes) -> dict[int, bytes]:
    return dict(attrs(msg, HEADER.size + TCMSG.size))


def kind_of(found: dict[int, bytes]) -> str:
    return text(found.get(TCA_KIND, b""))


def tbf_params(found: dict[int, bytes]) -> Optional[tuple[int, int, int, int, int]]:
    """(rate, buffer, limit, peakrate, mtu) of a TBF qdisc's options (64-bit rates when present)."""
    options = dict(attrs(found.get(TCA_OPTIONS, b""), 0))
    parms = options.get(TCA_TBF_PARMS)
    if parms is None or len(parms) < TBF_QOPT.size:
        return None
    fields = TBF_QOPT.unpack_from(parms)
    rate, peakrate, limit, buffer, mtu = fields[5], fields[11], fields[12], fields[13], fields[14]
    return _rate64(options, TCA_TBF_RATE64, rate), buffer, limit, _rate64(options, TCA_TBF_PRATE64, peakrate), mtu


def fq_codel_params(found: dict[int, bytes]) -> Optional[tuple[int, int, int, bool]]:
    """(target_us, interval_us, limit, ecn) of an fq_codel qdisc's options; None when one is missing."""
    options = dict(attrs(found.get(TCA_OPTIONS, b""), 0))
    values = [options.get(a) for a in (TCA_FQ_CODEL_TARGET, TCA_FQ_CODEL_INTERVAL, TCA_FQ_CODEL_LIMIT, TCA_FQ_CODEL_ECN)]
    if any(v is None or len(v) < U32.size for v in values):
        return None
    target, interval, limit, ecn = (U32.unpack_from(v)[0] for v in values)  # type: ignore[arg-type]
    return target, interval, limit, bool(ecn)


def _rate64(options: dict[int, bytes], attr: int, rate32: int) -> int:
    found = options.get(attr)
    if found is not None and len(found) >= U64.size and U64.unpack_from(found)[0]:
        return U64.unpack_from(found)[0]
    return rate32


def mirred_redirects(found: dict[int, bytes]) -> list[int]:
    """Ifindexes a u32 filter's mirred actions redirect to (egress redirect only)."""
    out = []
    options = dict(attrs(found.get(TCA_OPTIONS, b""), 0))
    for _prio, action in attrs(options.get(TCA_U32_ACT, b""), 0):
        parts = dict(attrs(action, 0))
        if text(parts.get(TCA_ACT_KIND, b"")) != "mirred":
            continue
        parms = dict(attrs(parts.get(TCA_ACT_OPTIONS, b""), 0)).get(TCA_MIRRED_PARMS)
        if parms is None or len(parms) < MIRRED.size:
            continue
        fields = MIRRED.unpack_from(parms)
        if fields[5] == MIRRED_EGRESS_REDIRECT:
            out.append(fields[6])
    return out
