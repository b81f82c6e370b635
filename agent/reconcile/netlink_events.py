"""What tells the reconciler, within milliseconds, that kernel state may have been removed.

Two netlink multicast subscriptions in the agent's (the node's) network namespace, with plain
``AF_NETLINK`` sockets from the standard library: only the message headers are read, so nothing
needs parsing beyond the type of each message.

* nftables (``NFNLGRP_NFTABLES``): every committed change is announced; a deleted table, chain,
  rule, set or set element (``nft flush ruleset``, a firewalld reload, ``iptables-restore`` on
  nft) may have taken portmap's table or bridge's masquerade rules with it;
* rtnetlink (``RTMGRP_LINK | RTMGRP_TC``): a deleted link, qdisc or filter may have been
  bandwidth's IFB, TBF or redirect.

An overrun socket (ENOBUFS: the kernel dropped notifications) is reported as every kind at once.
Additions are ignored, so our own repairs mostly do not wake us again.
"""

from __future__ import annotations

import errno
import socket
import struct

from cnichain.common.plugin_state import KINDS, NFT, TC

NETLINK_ROUTE = 0
NETLINK_NETFILTER = 12
NFNLGRP_NFTABLES = 7
RTMGRP_LINK = 0x1
RTMGRP_TC = 0x8
NFNL_SUBSYS_NFTABLES = 10
# NFT_MSG_DELTABLE, DELCHAIN, DELRULE, DELSET, DELSETELEM
NFT_DELETIONS = frozenset({2, 5, 8, 11, 14})
# RTM_DELLINK, RTM_DELQDISC, RTM_DELTFILTER
RTM_DELETIONS = frozenset({17, 37, 45})
ALL = KINDS  # every kind of change a repairer declares it cares about (NFT, TC)
_HEADER = struct.Struct("=IHHII")
_RCVBUF = 4 << 20


class Subscription:
    """One bound, non-blocking netlink socket and which deletions on it matter."""

    def __init__(self, protocol: int, groups: int, kind: str) -> None:
        self.kind = kind
        self.protocol = protocol
        self.sock = socket.socket(socket.AF_NETLINK, socket.SOCK_RAW | socket.SOCK_CLOEXEC, protocol)
        try:
            self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, _RCVBUF)
            self.sock.bind((0, groups))
            self.sock.setblocking(False)
        except BaseException:
            self.sock.close()
            raise

    def fileno(self) -> int:
        return self.sock.fileno()

    def read(self) -> frozenset[str]:
        """Drain what is queued; the kinds of deletion it announced (empty: nothing relevant)."""
        found: set[str] = set()
        for _ in range(1024):  # bounded: a flood is answered by a check, not read to the end
            try:
                data = self.sock.recv(1 << 16)
            except (BlockingIOError, InterruptedError):
                break
            except OSError as exc:
                if exc.errno == errno.ENOBUFS:
                    return ALL  # notifications were lost: assume the worst
                break
            if self.relevant(data):
                found.add(self.kind)
        return frozenset(found)

    def relevant(self, data: bytes) -> bool:
        """Whether one datagram of netlink messages holds a deletion this subscription watches."""
        offset = 0
        while offset + _HEADER.size <= len(data):
            length, msg_type, _flags, _seq, _pid = _HEADER.unpack_from(data, offset)
            if length < _HEADER.size:
                break
            if self.protocol == NETLINK_NETFILTER:
                if msg_type >> 8 == NFNL_SUBSYS_NFTABLES and msg_type & 0xFF in NFT_DELETIONS:
                    return True
            elif msg_type in RTM_DELETIONS:
                return True
            offset += (length + 3) & ~3
        return False

    def close(self) -> None:
        self.sock.close()


def subscribe() -> list[Subscription]:
    """Both subscriptions in the calling thread's network namespace."""
    subs = [Subscription(NETLINK_NETFILTER, 1 << (NFNLGRP_NFTABLES - 1), NFT)]
    try:
        subs.append(Subscription(NETLINK_ROUTE, RTMGRP_LINK | RTMGRP_TC, TC))
    except BaseException:
        subs[0].close()
        raise
    return subs
