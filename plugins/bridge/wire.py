"""The rtnetlink messages of bridge's common path, packed with ``struct`` (common.rtnl sends them).

Pure: values in, request bodies out, and the address listing decoded.  Each body carries the
attributes, in the order, that pyroute2 0.9 sent for the same call (tests/unit/test_bridge_wire.py
holds the captured bytes), so the kernel does exactly what it did; the requests of rarer paths
(VLAN filtering, the VLAN gateway, DAD waits, forced address replacement) still go through
pyroute2 (common.netlink.LazySession).
"""

from __future__ import annotations

import socket
import struct

from cnichain.common.rtnl import HEADER, IFINFO, U32, attrs, nested, nla

TYPE_CHECKING = False
if TYPE_CHECKING:  # annotations only
    from typing import Optional

RTM_NEWADDR, RTM_GETADDR, RTM_NEWROUTE = 20, 22, 24
NLM_F_APPEND = 0x800
IFLA_ADDRESS, IFLA_IFNAME, IFLA_MTU, IFLA_MASTER, IFLA_LINKINFO, IFLA_NET_NS_FD = 1, 3, 4, 10, 18, 28
IFLA_INFO_KIND, IFLA_INFO_DATA, IFLA_INFO_SLAVE_DATA = 1, 2, 5
VETH_INFO_PEER = 1
IFLA_BRPORT_MODE, IFLA_BRPORT_ISOLATED = 4, 33
IFA_ADDRESS, IFA_LOCAL, IFA_FLAGS = 1, 2, 8
RTA_DST, RTA_OIF, RTA_GATEWAY, RTA_PRIORITY, RTA_TABLE = 1, 4, 5, 6, 15
RT_TABLE_MAIN = 254
RTN_UNICAST = 1
IFF_UP = 0x1

IFADDR = struct.Struct("=BBBBI")  # struct ifaddrmsg: family, prefixlen, flags, scope, index
RTMSG = struct.Struct("=BBBBBBBBI")  # struct rtmsg: family, dst_len, src_len, tos, table, protocol, scope, type, flags


def _asciiz(value: str) -> bytes:
    return value.encode() + b"\0"


def _family(address: str) -> int:
    return socket.AF_INET6 if ":" in address else socket.AF_INET


def _packed(address: str) -> bytes:
    return socket.inet_pton(_family(address), address)


def new_bridge(name: str, mtu: int) -> bytes:
    """RTM_NEWLINK body: a bridge named ``name`` (``mtu`` when set; no VLAN filtering)."""
    body = IFINFO.pack(0, 0, 0, 0, 0) + nla(IFLA_IFNAME, _asciiz(name))
    if mtu:
        body += nla(IFLA_MTU, U32.pack(mtu))
    return body + nested(IFLA_LINKINFO, nla(IFLA_INFO_KIND, b"bridge\0"))


def new_veth(name: str, peer: str, peer_netns_fd: int, mtu: int, peer_mac: str) -> bytes:
    """RTM_NEWLINK body: the veth pair ``name`` (here) / ``peer`` (born in the namespace of
    ``peer_netns_fd``), both ends with ``mtu`` when set, the peer with ``peer_mac`` when set."""
    peer_body = IFINFO.pack(0, 0, 0, 0, 0) + nla(IFLA_IFNAME, _asciiz(peer)) + nla(IFLA_NET_NS_FD, U32.pack(peer_netns_fd))
    if mtu:
        peer_body += nla(IFLA_MTU, U32.pack(mtu))
    if peer_mac:
        peer_body += nla(IFLA_ADDRESS, bytes.fromhex(peer_mac.replace(":", "")))
    body = IFINFO.pack(0, 0, 0, 0, 0) + nla(IFLA_IFNAME, _asciiz(name))
    if mtu:
        body += nla(IFLA_MTU, U32.pack(mtu))
    info = nla(IFLA_INFO_KIND, b"veth\0") + nested(IFLA_INFO_DATA, nla(VETH_INFO_PEER, peer_body))
    return body + nested(IFLA_LINKINFO, info)


def enslave(index: int, master: int, up: bool) -> bytes:
    """RTM_NEWLINK body: link ``index`` enslaved to ``master`` (and up, in the same request)."""
    flags = IFF_UP if up else 0
    return IFINFO.pack(0, 0, index, flags, flags) + nla(IFLA_MASTER, U32.pack(master))


def bridge_port(index: int, hairpin: bool, isolated: bool) -> bytes:
    """RTM_NEWLINK body: bridge port options of link ``index`` (hairpin mode, isolation)."""
    data = b""
    if hairpin:
        data += nla(IFLA_BRPORT_MODE, b"\x01")
    if isolated:
        data += nla(IFLA_BRPORT_ISOLATED, b"\x01")
    info = nla(IFLA_INFO_KIND, b"bridge_slave\0") + nested(IFLA_INFO_SLAVE_DATA, data)
    return IFINFO.pack(0, 0, index, 0, 0) + nested(IFLA_LINKINFO, info)


def new_address(index: int, address: str, prefixlen: int, flags: int) -> bytes:
    """RTM_NEWADDR body: ``address/prefixlen`` on link ``index`` (IPv4: IFA_ADDRESS and IFA_LOCAL;
    IFA_FLAGS when ``flags``)."""
    family = _family(address)
    body = IFADDR.pack(family, prefixlen, 0, 0, index) + nla(IFA_ADDRESS, _packed(address))
    if family == socket.AF_INET:
        body += nla(IFA_LOCAL, _packed(address))
    if flags:
        body += nla(IFA_FLAGS, U32.pack(flags))
    return body


def address_dump(family: int) -> bytes:
    """RTM_GETADDR dump body for ``family`` (every link's: the caller picks by index)."""
    return IFADDR.pack(family, 0, 0, 0, 0)


def addresses(msgs: list[bytes], index: int) -> list[tuple[str, int]]:
    """(address, prefixlen) of link ``index`` in an RTM_GETADDR listing (IFA_ADDRESS)."""
    out = []
    for msg in msgs:
        family, prefixlen, _flags, _scope, at = IFADDR.unpack_from(msg, HEADER.size)
        if at != index:
            continue
        for kind, payload in attrs(msg, HEADER.size + IFADDR.size):
            if kind == IFA_ADDRESS:
                out.append((socket.inet_ntop(family, payload), prefixlen))
    return out


def new_route(dst: str, oif: int, gateway: str, priority: Optional[int], table: Optional[int],
              scope: int) -> bytes:
    """RTM_NEWROUTE body (with NLM_F_CREATE | NLM_F_APPEND: ``ip route append``) for ``dst``
    ("a.b.c.d/n", "::/0", ...) via ``gateway`` (none: a device route) out of ``oif``, proto boot;
    ``table`` below 256 (a larger one goes through pyroute2)."""
    address, _, bits = dst.partition("/")
    family = _family(address)
    dst_len = int(bits) if bits else (128 if family == socket.AF_INET6 else 32)
    body = RTMSG.pack(family, dst_len, 0, 0, RT_TABLE_MAIN if table is None else table, 3, scope, RTN_UNICAST, 0)
    if dst_len:
        body += nla(RTA_DST, _packed(address))
    body += nla(RTA_OIF, U32.pack(oif))
    if gateway:
        body += nla(RTA_GATEWAY, _packed(gateway))
    if priority is not None:
        body += nla(RTA_PRIORITY, U32.pack(priority))
    if table is not None:
        body += nla(RTA_TABLE, U32.pack(table))
    return body
