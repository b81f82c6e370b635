"""bandwidth's rtnetlink messages (plugins/bandwidth/tc.py) against the bytes pyroute2 0.9 sends
for the same requests, and the decoders against those messages (pure: no kernel).

The expected bodies (after the 16-byte netlink header) were captured from pyroute2's socket while
it made the requests the plugin made through it; sending the same bytes is what makes the kernel
build exactly the same qdiscs and filter as before, and as the reference.
"""

from __future__ import annotations

from cnichain.common import rtnl
from cnichain.plugins.bandwidth import tc
from cnichain.plugins.bandwidth.config import IFB_PREFIX
from cnichain.plugins.bandwidth.kernel import (CLSACT_INGRESS, ETH_P_ALL, FILTER_PRIO, FLOWID, IFB_ALIAS_PREFIX, INGRESS_HANDLE, TBF_HANDLE,
                                               TC_H_INGRESS, TC_H_ROOT)
from cnichain.plugins.bandwidth.plan import TbfParams

IFB = ("000000000000000000000000000000000d00030062777074657374300000000008000400dc05000008000d0000000000"
      "0c0012000800010069666200")
TBF = ("000000000400000000000100ffffffff0000000008000100746266002c00020028000100000000000000000020bcbe00"
      "000000000000000000000000400d0300a086010000000000")
TBF64 = ("000000000300000000000100ffffffff00000000080001007462660038000200280001000000000000000000ffffffff"
      "000000000000000000000000400d0300a0860100000000000c0004000000000002000000")
UP = ("0000000004000000010000000100000022001400636e69636861696e2d62616e647769647468206e65743d782069643d"
      "79000000")
INGRESS = "00000000030000000000fffff1ffffff000000000c000100696e677265737300"
REDIRECT = ("0000000003000000000000000000ffff0003010008000100753332006800020038000700340001000b0001006d697272"
      "656400002400028020000200000000000000000004000000000000000000000001000000040000000800010001000100"
      "240005000100010000000000000000000000000000000000000000000000000000000000")
DEL_TBF = "000000000300000000000100ffffffff000000000800010074626600"
DEL_INGRESS = "00000000030000000000fffff1ffffff00000000"
DEL_LINK = "00000000040000000000000000000000"


def _hex(text: str) -> bytes:
    return bytes.fromhex(text.replace(" ", ""))


def test_link_requests_are_pyroute2s_bytes():
    assert tc.new_ifb(IFB_PREFIX + "test0", 1500) == _hex(IFB)
    assert tc.link_up_with_alias(4, IFB_ALIAS_PREFIX + " net=x id=y") == _hex(UP)
    assert tc.link_index_only(4) == _hex(DEL_LINK)


def test_qdisc_requests_are_pyroute2s_bytes():
    params = TbfParams(rate=12_500_000, buffer=100_000, limit=200_000)
    assert tc.tbf(4, TBF_HANDLE, TC_H_ROOT, params) == _hex(TBF)
    assert tc.tbf(3, TBF_HANDLE, TC_H_ROOT, TbfParams(rate=2**33, buffer=100_000, limit=200_000)) == _hex(TBF64)
    assert tc.qdisc(3, INGRESS_HANDLE, TC_H_INGRESS, "ingress") == _hex(INGRESS)
    assert tc.qdisc(3, TBF_HANDLE, TC_H_ROOT, "tbf") == _hex(DEL_TBF)
    assert tc.qdisc(3, INGRESS_HANDLE, TC_H_INGRESS) == _hex(DEL_INGRESS)


def test_redirect_filter_is_pyroute2s_bytes():
    assert tc.u32_redirect(3, INGRESS_HANDLE, FILTER_PRIO, ETH_P_ALL, FLOWID, 4) == _hex(REDIRECT)


def _as_message(body: bytes, msg_type: int) -> bytes:
    return rtnl.HEADER.pack(rtnl.HEADER.size + len(body), msg_type, 0, 1, 0) + body


def test_decoders_read_back_what_the_requests_carry():
    msg = _as_message(tc.tbf(3, TBF_HANDLE, TC_H_ROOT, TbfParams(rate=2**33, buffer=7, limit=9)), tc.RTM_NEWQDISC)
    assert tc.tc_header(msg) == (3, TBF_HANDLE, TC_H_ROOT)
    found = tc.tc_attrs(msg)
    assert tc.kind_of(found) == "tbf" and tc.tbf_params(found) == (2**33, 7, 9, 0, 0)
    small = tc.tc_attrs(_as_message(tc.tbf(3, TBF_HANDLE, TC_H_ROOT, TbfParams(rate=5, buffer=7, limit=9)), 36))
    assert tc.tbf_params(small) == (5, 7, 9, 0, 0)
    for peak in (2**20, 2**34):  # 32-bit and 64-bit peak rates, each with its bucket in ticks
        peaked = TbfParams(rate=5, buffer=7, limit=9, peakrate=peak, mtu=11)
        assert tc.tbf_params(tc.tc_attrs(_as_message(tc.tbf(3, TBF_HANDLE, TC_H_ROOT, peaked), 36))) == tuple(peaked)
    flt = tc.tc_attrs(_as_message(tc.u32_redirect(3, INGRESS_HANDLE, 1, ETH_P_ALL, FLOWID, 42), tc.RTM_NEWTFILTER))
    assert tc.kind_of(flt) == "u32" and tc.mirred_redirects(flt) == [42]


def test_link_request_names_the_link_and_skips_statistics():
    attrs = dict(rtnl.attrs(rtnl.IFINFO.pack(0, 0, 0, 0, 0) + rtnl.nla(rtnl.IFLA_IFNAME, b"eth0\0"), rtnl.IFINFO.size))
    assert attrs[rtnl.IFLA_IFNAME] == b"eth0\0"


def test_pod_side_messages():
    """The clsact qdisc and the redirect on its ingress hook, and the filter delete by prio: the
    same layouts as the host-side ones, other parents (what ``tc`` sends for ``dev X clsact`` and
    ``dev X ingress``)."""
    clsact = tc.qdisc(3, INGRESS_HANDLE, TC_H_INGRESS, "clsact")
    assert clsact == tc.tcmsg(3, INGRESS_HANDLE, TC_H_INGRESS) + rtnl.nla(tc.TCA_KIND, b"clsact\0")
    msg = _as_message(tc.u32_redirect(3, CLSACT_INGRESS, FILTER_PRIO, ETH_P_ALL, FLOWID, 42), tc.RTM_NEWTFILTER)
    assert tc.tc_header(msg) == (3, 0, CLSACT_INGRESS) and tc.tc_prio(msg) == FILTER_PRIO
    assert tc.mirred_redirects(tc.tc_attrs(msg)) == [42]
    delete = tc.filter_at(3, CLSACT_INGRESS, FILTER_PRIO, ETH_P_ALL, "u32")
    assert delete == tc.tcmsg(3, 0, CLSACT_INGRESS, (FILTER_PRIO << 16) | 0x0300) + rtnl.nla(tc.TCA_KIND, b"u32\0")


def test_fq_codel_child_is_what_pyroute2_decodes_and_reads_back():
    from pyroute2.netlink.rtnl.tcmsg import tcmsg

    from cnichain.plugins.bandwidth.kernel import AQM_HANDLE, TBF_CLASS
    from cnichain.plugins.bandwidth.plan import AqmParams

    params = AqmParams(target_us=18_216, interval_us=100_000, limit=1024)
    msg = _as_message(tc.fq_codel(3, AQM_HANDLE, TBF_CLASS, params), tc.RTM_NEWQDISC)
    decoded = tcmsg(msg)
    decoded.decode()
    assert (decoded["index"], decoded["handle"], decoded["parent"]) == (3, 0x100000, 0x10001)  # 10: under 1:1
    assert decoded.get_attr("TCA_KIND") == "fq_codel"
    options = decoded.get_attr("TCA_OPTIONS")
    assert [(name, value) for name, value in options["attrs"]] == [
        ("TCA_FQ_CODEL_TARGET", 18_216), ("TCA_FQ_CODEL_LIMIT", 1024), ("TCA_FQ_CODEL_INTERVAL", 100_000),
        ("TCA_FQ_CODEL_ECN", 1)]
    assert tc.fq_codel_params(tc.tc_attrs(msg)) == tuple(params)
    assert tc.fq_codel_params(tc.tc_attrs(_as_message(tc.qdisc(3, AQM_HANDLE, TBF_CLASS, "fq_codel"), 36))) is None
