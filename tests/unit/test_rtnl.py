"""common/rtnl.py without a kernel: the link changes are the bytes pyroute2 0.9 sends for them
(captured from its socket for tuning's ``ip link set`` requests), the link decoder reads back what
the plugins use."""

from __future__ import annotations

from cnichain.common import rtnl

# Bodies after the 16-byte netlink header: MAC, promisc on, MTU, allmulti on, txqueuelen, promisc off.
MAC = "000000000300000000000000000000000a0001000a00000000010000"
PROMISC_ON = "0000000003000000000100000001000 0"
MTU = "0000000003000000000000000000000008000400780500 00"
ALLMULTI_ON = "00000000030000000002000000020000"
TXQLEN = "00000000030000000000000000000000 08000d00f4010000"
PROMISC_OFF = "00000000030000000000000000010000"
DEL_BY_NAME = "000000000000000000000000000000000800030076683000"  # bridge DEL: the pod's link by name


def _hex(text: str) -> bytes:
    return bytes.fromhex(text.replace(" ", ""))


def test_link_changes_are_pyroute2s_bytes():
    assert rtnl.link_change(3, mac="0a:00:00:00:00:01") == _hex(MAC)
    assert rtnl.link_change(3, flags=0x100, change=0x100) == _hex(PROMISC_ON)
    assert rtnl.link_change(3, mtu=1400) == _hex(MTU)
    assert rtnl.link_change(3, flags=0x200, change=0x200) == _hex(ALLMULTI_ON)
    assert rtnl.link_change(3, txqlen=500) == _hex(TXQLEN)
    assert rtnl.link_change(3, flags=0, change=0x100) == _hex(PROMISC_OFF)
    assert rtnl.link_named("vh0") == _hex(DEL_BY_NAME)


def _as_message(body: bytes, msg_type: int) -> bytes:
    return rtnl.HEADER.pack(rtnl.HEADER.size + len(body), msg_type, 0, 1, 0) + body


def test_link_decoder_reads_what_the_plugins_use():
    body = (rtnl.IFINFO.pack(0, 1, 7, 0x1003, 0) + rtnl.nla(rtnl.IFLA_IFNAME, b"veth1\0")
            + rtnl.nla(rtnl.IFLA_MTU, rtnl.U32.pack(1450)) + rtnl.nla(rtnl.IFLA_ADDRESS, bytes.fromhex("0aFF00000001"))
            + rtnl.nested(rtnl.IFLA_LINKINFO, rtnl.nla(rtnl.IFLA_INFO_KIND, b"veth\0"))
            + rtnl.nla(rtnl.IFLA_LINK, rtnl.U32.pack(3)) + rtnl.nla(rtnl.IFLA_MASTER, rtnl.U32.pack(2))
            + rtnl.nla(rtnl.IFLA_OPERSTATE, b"\x06") + rtnl.nla(rtnl.IFLA_TXQLEN, rtnl.U32.pack(1000)))
    link = rtnl.decode_link(_as_message(body, rtnl.RTM_NEWLINK))
    assert link == rtnl.Link(index=7, name="veth1", flags=0x1003, mtu=1450, mac="0a:ff:00:00:00:01", kind="veth",
                             operstate="UP", peer=3, master=2, txqlen=1000)
    assert link.up


def test_a_link_without_attributes_has_the_defaults():
    link = rtnl.decode_link(_as_message(rtnl.IFINFO.pack(0, 0, 9, 0, 0), rtnl.RTM_NEWLINK))
    assert (link.index, link.name, link.kind, link.peer, link.operstate, link.up) == (9, "", "", 0, "UNKNOWN", False)
