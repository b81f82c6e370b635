"""Plain rtnetlink: requests packed and answers read with ``struct`` on a socket of our own.

The requests the plugins make most -- one link by name or index, and bandwidth's few tc and link
changes -- cost the kernel microseconds, but through pyroute2 each costs ~0.3 ms of Python (its
request machinery, an event-loop turn, a decode of every attribute of the answer), and opening an
``IPRoute`` costs ~0.5-2 ms more; importing pyroute2 at all is ~0.1 s of a cold exec.  Here a
request is a few ``struct.pack`` calls, an answer is decoded only as far as a plugin reads it
(:class:`Link`), and nothing but ``socket`` and ``struct`` is imported.  The layout is the
kernel's netlink ABI (``linux/netlink.h``, ``linux/rtnetlink.h``, ``linux/if_link.h``), which does
not change.

A link lookup names the link (IFLA_IFNAME, or the index in the header) and the kernel resolves it,
so no listing is ever made, however many links there are; statistics are left out of the answer
(``RTEXT_FILTER_SKIP_STATS``): nothing here reads them.  Listings (:meth:`RouteSocket.dump`) are
redone when the kernel marks them interrupted (``NLM_F_DUMP_INTR``), as the reference's
``netlinksafe`` does.  A refusal is an ``OSError`` with the kernel's errno.
"""

from __future__ import annotations

import os
import socket
import struct

from . import kerneltime
from .record import FrozenRecord

TYPE_CHECKING = False
if TYPE_CHECKING:  # annotations only
    from typing import Optional

NETLINK_ROUTE = 0
NLMSG_ERROR, NLMSG_DONE = 2, 3
RTM_NEWLINK, RTM_DELLINK, RTM_GETLINK = 16, 17, 18
NLM_F_REQUEST, NLM_F_MULTI, NLM_F_ACK = 0x1, 0x2, 0x4
NLM_F_DUMP_INTR = 0x10
NLM_F_DUMP = 0x300
NLM_F_EXCL, NLM_F_CREATE = 0x200, 0x400
NLA_F_NESTED = 0x8000
NLA_TYPE_MASK = 0x3FFF  # without NLA_F_NESTED / NLA_F_NET_BYTEORDER
IFLA_ADDRESS, IFLA_IFNAME, IFLA_MTU, IFLA_LINK, IFLA_MASTER = 1, 3, 4, 5, 10
IFLA_TXQLEN, IFLA_OPERSTATE, IFLA_LINKINFO, IFLA_IFALIAS, IFLA_EXT_MASK = 13, 16, 18, 20, 29
IFLA_INFO_KIND = 1
RTEXT_FILTER_SKIP_STATS = 1 << 3
IFF_UP = 0x1
DUMP_ATTEMPTS = 5  # the reference's netlinksafe.maxAttempts
# IF_OPER_* (RFC 2863), as ip(8) and pyroute2 print them.
OPERSTATES = ("UNKNOWN", "NOTPRESENT", "DOWN", "LOWERLAYERDOWN", "TESTING", "DORMANT", "UP")

HEADER = struct.Struct("=IHHII")  # struct nlmsghdr: len, type, flags, seq, pid
IFINFO = struct.Struct("=BxHiII")  # struct ifinfomsg: family, pad, type, index, flags, change
NLA = struct.Struct("=HH")  # struct nlattr: len, type
U32 = struct.Struct("=I")
_ERRNO = struct.Struct("=i")


class Link(FrozenRecord):
    """What the plugins read of a link: header fields and a few attributes, decoded."""

    index: int
    name: str
    flags: int = 0  # IFF_* of the ifinfomsg header
    mtu: int = 0
    mac: str = ""  # "aa:bb:..." lower case, "" when the link has no address
    kind: str = ""  # IFLA_INFO_KIND ("veth", "bridge", "ifb", ...), "" for a plain device
    alias: str = ""
    operstate: str = "UNKNOWN"  # "UP", "DOWN", ... (IF_OPER_*)
    peer: int = 0  # IFLA_LINK: a veth's peer index, in the peer's namespace; 0 when absent
    master: int = 0  # IFLA_MASTER: the bridge a port is enslaved to; 0 when none
    txqlen: int = 0

    @property
    def up(self) -> bool:
        """Administratively up (IFF_UP), what ``ip link set up`` sets."""
        return bool(self.flags & IFF_UP)


class RouteSocket:
    """A route netlink socket of the namespace the calling thread is in when it is made (it stays
    bound to that namespace); one request at a time."""

    __slots__ = ("sock", "seq")

    def __init__(self) -> None:
        sock = socket.socket(socket.AF_NETLINK, socket.SOCK_RAW | socket.SOCK_CLOEXEC, NETLINK_ROUTE)
        try:
            sock.bind((0, 0))
        except BaseException:
            sock.close()
            raise
        self.sock = sock
        self.seq = 0

    @property
    def rtnl(self) -> RouteSocket:
        """Itself: what a function taking "an IPRoute or a RouteSocket" reads (see common.netlink)."""
        return self

    def close(self) -> None:
        self.sock.close()

    def __enter__(self) -> RouteSocket:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def _send(self, msg_type: int, flags: int, body: bytes) -> int:
        self.seq += 1
        data = HEADER.pack(HEADER.size + len(body), msg_type, flags, self.seq, 0) + body
        if kerneltime.spans is None:
            self.sock.send(data)
        else:
            kerneltime.timed("netlink", self.sock.send)(data)
        return self.seq

    def _messages(self, seq: int) -> list[tuple[int, int, bytes]]:
        """The (type, flags, message) of the next datagram answering ``seq``."""
        while True:
            size = self.sock.recv_into(_peek, HEADER.size, socket.MSG_PEEK | socket.MSG_TRUNC)
            data = self.sock.recv(max(size, HEADER.size))
            out = []
            offset = 0
            while offset + HEADER.size <= len(data):
                length, kind, flags, got, _pid = HEADER.unpack_from(data, offset)
                if length < HEADER.size:
                    break
                if got == seq:
                    out.append((kind, flags, data[offset: offset + length]))
                offset += (length + 3) & ~3
            if out:
                return out  # (answers to an earlier request that gave up are skipped)

    def request(self, msg_type: int, flags: int, body: bytes) -> list[bytes]:
        """Send one request with NLM_F_ACK; the messages answering it before the ACK (a GET's
        answer), or OSError with the kernel's errno."""
        seq = self._send(msg_type, NLM_F_REQUEST | NLM_F_ACK | flags, body)
        answers: list[bytes] = []
        while True:
            for kind, _flags, msg in self._messages(seq):
                if kind == NLMSG_ERROR:
                    (code,) = _ERRNO.unpack_from(msg, HEADER.size)
                    if code:
                        raise OSError(-code, os.strerror(-code))
                    return answers
                answers.append(msg)

    def dump(self, msg_type: int, body: bytes) -> list[bytes]:
        """A listing (NLM_F_DUMP): every message of it, redone while the kernel flags it
        interrupted, up to :data:`DUMP_ATTEMPTS` (then the last one is used)."""
        out: list[bytes] = []
        for _ in range(DUMP_ATTEMPTS):
            out, interrupted = self._dump_once(msg_type, body)
            if not interrupted:
                break
        return out

    def _dump_once(self, msg_type: int, body: bytes) -> tuple[list[bytes], bool]:
        seq = self._send(msg_type, NLM_F_REQUEST | NLM_F_DUMP, body)
        out: list[bytes] = []
        interrupted = False
        while True:
            for kind, flags, msg in self._messages(seq):
                interrupted = interrupted or bool(flags & NLM_F_DUMP_INTR)
                if kind == NLMSG_DONE:
                    return out, interrupted
                if kind == NLMSG_ERROR:
                    (code,) = _ERRNO.unpack_from(msg, HEADER.size)
                    raise OSError(-code, os.strerror(-code))
                out.append(msg)

    def get_link(self, name: str = "", index: int = 0) -> Link:
        """One link by ``name`` (or ``index``); OSError ENODEV when there is none."""
        attrs = nla(IFLA_EXT_MASK, U32.pack(RTEXT_FILTER_SKIP_STATS))
        if name:
            attrs = nla(IFLA_IFNAME, name.encode() + b"\0") + attrs
        body = IFINFO.pack(0, 0, 0 if name else index, 0, 0) + attrs
        for msg in self.request(RTM_GETLINK, 0, body):
            (kind,) = struct.unpack_from("=H", msg, 4)
            if kind == RTM_NEWLINK:
                return decode_link(msg)
        raise OSError(0, "no answer to RTM_GETLINK")

    def links(self) -> list[Link]:
        """Every link of the namespace (a listing: for the rare whole-namespace views only)."""
        body = IFINFO.pack(0, 0, 0, 0, 0) + nla(IFLA_EXT_MASK, U32.pack(RTEXT_FILTER_SKIP_STATS))
        return [decode_link(m) for m in self.dump(RTM_GETLINK, body)]


_peek = bytearray(HEADER.size)


def link_named(name: str) -> bytes:
    """RTM_NEWLINK / RTM_DELLINK body naming the link by IFLA_IFNAME (the kernel resolves it)."""
    return IFINFO.pack(0, 0, 0, 0, 0) + nla(IFLA_IFNAME, name.encode() + b"\0")


def link_change(index: int, *, flags: int = 0, change: int = 0, mac: str = "", mtu: int = 0,
                txqlen: Optional[int] = None) -> bytes:
    """RTM_NEWLINK body changing link ``index``: IFF_* ``flags`` under the ``change`` mask, the MAC
    (``aa:bb:...``), the MTU, the transmit queue length -- what ``ip link set`` sends for each."""
    body = IFINFO.pack(0, 0, index, flags, change)
    if mac:
        body += nla(IFLA_ADDRESS, bytes.fromhex(mac.replace(":", "")))
    if mtu:
        body += nla(IFLA_MTU, U32.pack(mtu))
    if txqlen is not None:
        body += nla(IFLA_TXQLEN, U32.pack(txqlen))
    return body


def nla(kind: int, payload: bytes) -> bytes:
    """One attribute, padded to 4 bytes."""
    length = NLA.size + len(payload)
    return NLA.pack(length, kind) + payload + b"\0" * (-length % 4)


def nested(kind: int, *attrs: bytes) -> bytes:
    return nla(kind, b"".join(attrs))


def attrs(data: bytes, offset: int) -> list[tuple[int, bytes]]:
    """The (type, payload) attributes from ``offset`` to the end of ``data``."""
    out = []
    end = len(data)
    while offset + NLA.size <= end:
        length, kind = NLA.unpack_from(data, offset)
        if length < NLA.size:
            break
        out.append((kind & NLA_TYPE_MASK, data[offset + NLA.size: offset + length]))
        offset += (length + 3) & ~3
    return out


def text(payload: bytes) -> str:
    return payload.split(b"\0", 1)[0].decode("utf-8", "replace")


def decode_link(msg: bytes) -> Link:
    """The :class:`Link` in one RTM_NEWLINK message (header included)."""
    _family, _type, index, flags, _change = IFINFO.unpack_from(msg, HEADER.size)
    values: dict = {}
    for kind, payload in attrs(msg, HEADER.size + IFINFO.size):
        if kind == IFLA_IFNAME:
            values["name"] = text(payload)
        elif kind == IFLA_MTU:
            values["mtu"] = U32.unpack_from(payload)[0]
        elif kind == IFLA_ADDRESS:
            values["mac"] = ":".join(f"{b:02x}" for b in payload)
        elif kind == IFLA_LINKINFO:
            for sub, value in attrs(payload, 0):
                if sub == IFLA_INFO_KIND:
                    values["kind"] = text(value)
        elif kind == IFLA_IFALIAS:
            values["alias"] = text(payload)
        elif kind == IFLA_OPERSTATE:
            state = payload[0]
            values["operstate"] = OPERSTATES[state] if state < len(OPERSTATES) else str(state)
        elif kind == IFLA_LINK:
            values["peer"] = U32.unpack_from(payload)[0]
        elif kind == IFLA_MASTER:
            values["master"] = U32.unpack_from(payload)[0]
        elif kind == IFLA_TXQLEN:
            values["txqlen"] = U32.unpack_from(payload)[0]
    return Link(index=index, name=values.pop("name", ""), flags=flags, **values)
