"""One link, asked of the kernel by name or index: an RTM_GETLINK on a plain rtnetlink socket.

A lookup is the request the plugins make most (the bridge, the pod's interface, a veth peer, an
IFB), and the kernel answers it in microseconds; building and decoding it through pyroute2 costs
~0.3 ms of Python each (its request machinery, an event-loop turn, and a decode of every one of the
link's forty-odd attributes).  Here the request is packed and the answer read with ``struct``, and
only the attributes a plugin reads are kept (:class:`Link`).  The layout is the kernel's netlink
ABI (``linux/netlink.h``, ``linux/rtnetlink.h``, ``linux/if_link.h``), which does not change.

The kernel resolves the name itself (IFLA_IFNAME in the request), so no link listing is ever
made, however many links the namespace has.  Statistics are left out of the answer
(``RTEXT_FILTER_SKIP_STATS``): nothing here reads them.
"""

from __future__ import annotations

import os
import socket
import struct

from . import kerneltime
from .record import FrozenRecord

NETLINK_ROUTE = 0
RTM_NEWLINK, RTM_GETLINK = 16, 18
NLMSG_ERROR = 2
NLM_F_REQUEST = 0x1
IFLA_ADDRESS, IFLA_IFNAME, IFLA_MTU, IFLA_LINK, IFLA_MASTER = 1, 3, 4, 5, 10
IFLA_TXQLEN, IFLA_OPERSTATE, IFLA_LINKINFO, IFLA_IFALIAS, IFLA_EXT_MASK = 13, 16, 18, 20, 29
IFLA_INFO_KIND = 1
RTEXT_FILTER_SKIP_STATS = 1 << 3
NLA_TYPE_MASK = 0x3FFF  # without NLA_F_NESTED / NLA_F_NET_BYTEORDER
IFF_UP = 0x1
# IF_OPER_* (RFC 2863), as ip(8) and pyroute2 print them.
OPERSTATES = ("UNKNOWN", "NOTPRESENT", "DOWN", "LOWERLAYERDOWN", "TESTING", "DORMANT", "UP")

_HEADER = struct.Struct("=IHHII")  # struct nlmsghdr: len, type, flags, seq, pid
_IFINFO = struct.Struct("=BxHiII")  # struct ifinfomsg: family, pad, type, index, flags, change
_NLA = struct.Struct("=HH")  # struct nlattr: len, type
_U32 = struct.Struct("=I")
_peek = bytearray(_HEADER.size)


class Link(FrozenRecord):
    """What the plugins read of a link: header fields and a few attributes, decoded."""

    __slots__ = _fields = ("index", "name", "flags", "mtu", "mac", "kind", "alias", "operstate",
                           "peer", "master", "txqlen")
    index: int
    name: str
    flags: int  # IFF_* of the ifinfomsg header
    mtu: int
    mac: str  # "aa:bb:..." lower case, "" when the link has no address
    kind: str  # IFLA_INFO_KIND ("veth", "bridge", "ifb", ...), "" for a plain device
    alias: str
    operstate: str  # "UP", "DOWN", ... (IF_OPER_*)
    peer: int  # IFLA_LINK: a veth's peer index, in the peer's namespace; 0 when absent
    master: int  # IFLA_MASTER: the bridge a port is enslaved to; 0 when none
    txqlen: int

    def __init__(self, index: int, name: str, flags: int = 0, mtu: int = 0, mac: str = "", kind: str = "",
                 alias: str = "", operstate: str = "UNKNOWN", peer: int = 0, master: int = 0,
                 txqlen: int = 0) -> None:
        self._assign(index=index, name=name, flags=flags, mtu=mtu, mac=mac, kind=kind, alias=alias,
                     operstate=operstate, peer=peer, master=master, txqlen=txqlen)

    @property
    def up(self) -> bool:
        """Administratively up (IFF_UP), what ``ip link set up`` sets."""
        return bool(self.flags & IFF_UP)


def open_socket() -> socket.socket:
    """A route netlink socket of the calling thread's namespace (it stays bound to it)."""
    sock = socket.socket(socket.AF_NETLINK, socket.SOCK_RAW | socket.SOCK_CLOEXEC, NETLINK_ROUTE)
    try:
        sock.bind((0, 0))
    except BaseException:
        sock.close()
        raise
    return sock


def request(seq: int, name: str = "", index: int = 0) -> bytes:
    """The RTM_GETLINK message for the link ``name`` (or ``index`` when no name is given)."""
    attrs = _nla(IFLA_EXT_MASK, _U32.pack(RTEXT_FILTER_SKIP_STATS))
    if name:
        attrs = _nla(IFLA_IFNAME, name.encode() + b"\0") + attrs
    body = _IFINFO.pack(0, 0, 0 if name else index, 0, 0) + attrs
    return _HEADER.pack(_HEADER.size + len(body), RTM_GETLINK, NLM_F_REQUEST, seq, 0) + body


def _nla(kind: int, payload: bytes) -> bytes:
    length = _NLA.size + len(payload)
    return _NLA.pack(length, kind) + payload + b"\0" * (-length % 4)


def get(sock: socket.socket, seq: int, name: str = "", index: int = 0) -> Link:
    """Ask ``sock``'s namespace for one link; OSError with the kernel's errno when it refuses
    (ENODEV: no such link)."""
    if kerneltime.spans is None:
        sock.send(request(seq, name, index))
    else:
        kerneltime.timed("netlink", sock.send)(request(seq, name, index))
    while True:
        size = sock.recv_into(_peek, _HEADER.size, socket.MSG_PEEK | socket.MSG_TRUNC)  # its real size
        data = sock.recv(max(size, _HEADER.size))
        length, kind, _flags, got_seq, _pid = _HEADER.unpack_from(data)
        if got_seq != seq:
            continue  # an answer to an earlier request that gave up (never expected; harmless)
        if kind == NLMSG_ERROR:
            (code,) = struct.unpack_from("=i", data, _HEADER.size)
            err = -code
            raise OSError(err, os.strerror(err))
        if kind != RTM_NEWLINK:
            raise OSError(0, f"unexpected netlink message type {kind} answering RTM_GETLINK")
        return decode(data[:length])


def decode(msg: bytes) -> Link:
    """The :class:`Link` in one RTM_NEWLINK message (header included)."""
    _family, _type, index, flags, _change = _IFINFO.unpack_from(msg, _HEADER.size)
    values: dict = {}
    for kind, payload in _attrs(msg, _HEADER.size + _IFINFO.size):
        if kind == IFLA_IFNAME:
            values["name"] = _text(payload)
        elif kind == IFLA_MTU:
            values["mtu"] = _U32.unpack_from(payload)[0]
        elif kind == IFLA_ADDRESS:
            values["mac"] = ":".join(f"{b:02x}" for b in payload)
        elif kind == IFLA_LINKINFO:
            for sub, value in _attrs(payload, 0):
                if sub == IFLA_INFO_KIND:
                    values["kind"] = _text(value)
        elif kind == IFLA_IFALIAS:
            values["alias"] = _text(payload)
        elif kind == IFLA_OPERSTATE:
            state = payload[0]
            values["operstate"] = OPERSTATES[state] if state < len(OPERSTATES) else str(state)
        elif kind == IFLA_LINK:
            values["peer"] = _U32.unpack_from(payload)[0]
        elif kind == IFLA_MASTER:
            values["master"] = _U32.unpack_from(payload)[0]
        elif kind == IFLA_TXQLEN:
            values["txqlen"] = _U32.unpack_from(payload)[0]
    return Link(index=index, name=values.pop("name", ""), flags=flags, **values)


def _attrs(data: bytes, offset: int) -> list[tuple[int, bytes]]:
    out = []
    end = len(data)
    while offset + _NLA.size <= end:
        length, kind = _NLA.unpack_from(data, offset)
        if length < _NLA.size:
            break
        out.append((kind & NLA_TYPE_MASK, data[offset + _NLA.size: offset + length]))
        offset += (length + 3) & ~3
    return out


def _text(payload: bytes) -> str:
    return payload.split(b"\0", 1)[0].decode("utf-8", "replace")
