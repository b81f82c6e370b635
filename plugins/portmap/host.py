"""Host-side adjustments portmap makes besides nftables: route_localnet and UDP conntrack flush.

Neither needs pyroute2 for the common case: the interface routing to the pod is found in
``/proc/net/route`` of the calling thread's namespace.  The conntrack flush does need netlink
and imports pyroute2 only when there are UDP mappings, exactly when the reference flushes.
"""

from __future__ import annotations

import ipaddress

from cnichain.common import sysctl
from cnichain.common.errors import plugin_error
from cnichain.common.kernel_errors import failures
from cnichain.common.log import log

TYPE_CHECKING = False
if TYPE_CHECKING:  # annotations only
    from typing import Optional

    from cnichain.common.types import Result


def route_interface(container_ip: str, route_table: str = "/proc/thread-self/net/route") -> Optional[str]:
    """The interface of the longest-prefix IPv4 route to ``container_ip`` in the main table."""
    target = int(ipaddress.IPv4Address(container_ip))
    best: tuple[int, str] | None = None
    try:
        with open(route_table, encoding="ascii") as fh:
            lines = fh.read().splitlines()[1:]
    except OSError:
        return None
    for line in lines:
        cols = line.split()
        if len(cols) < 8:
            continue
        iface, dest_hex, mask_hex = cols[0], cols[1], cols[7]
        # Little-endian hex of the network byte order address, as the kernel prints it.
        dest = int.from_bytes(bytes.fromhex(dest_hex)[::-1], "big")
        mask = int.from_bytes(bytes.fromhex(mask_hex)[::-1], "big")
        if target & mask != dest:
            continue
        plen = bin(mask).count("1")
        if best is None or plen > best[0]:
            best = (plen, iface)
    return best[1] if best else None


def host_interface_from_result(prev: Result) -> Optional[str]:
    for iface in prev.interfaces:
        if not iface.sandbox and iface.name:
            return iface.name
    return None


def localnet_interface(container_ip: str, prev: Result) -> str:
    """The host interface towards the pod, found before anything is changed."""
    ifname = route_interface(container_ip) or host_interface_from_result(prev)
    if not ifname:
        raise plugin_error(f"unable to enable route_localnet: no route to {container_ip}")
    sysctl.path_for_interface("net/ipv4/conf/%s/route_localnet", ifname)  # validates the name
    return ifname


def enable_route_localnet(ifname: str) -> None:
    """Let 127.0.0.1 be DNATed out of the interface towards the pod (IPv4 localhost hostPorts)."""
    try:
        sysctl.ensure(sysctl.path_for_interface("net/ipv4/conf/%s/route_localnet", ifname), "1")
    except OSError as exc:
        raise plugin_error(f"unable to enable route_localnet: {exc}") from None


def flush_udp_conntrack(family: int, ports: list[int]) -> int:
    """Delete conntrack entries of UDP flows to ``ports`` so they re-evaluate the new DNAT.

    Without this a client that kept sending before the pod existed stays pinned to the stale,
    un-NATed entry.  Failures are logged, never fatal (as in the reference).  Returns the number
    of entries deleted.
    """
    if not ports:
        return 0
    wanted = set(ports)
    deleted = 0
    try:
        import socket  # only here: ~3 ms of import that TCP-only mappings do not need

        from pyroute2 import Conntrack
        from pyroute2.conntrack import NFCTAttrTuple

        fam = socket.AF_INET if family == 4 else socket.AF_INET6
        ct = Conntrack()
        try:
            for port in sorted(wanted):
                match = NFCTAttrTuple(family=fam, proto=socket.IPPROTO_UDP, dport=port)
                for entry in list(ct.dump_entries(tuple_orig=match)):
                    orig = entry.tuple_orig
                    if orig.proto != socket.IPPROTO_UDP or orig.dport != port:
                        continue
                    try:
                        ct.entry("del", tuple_orig=orig)
                        deleted += 1
                    except failures() as exc:  # raced with expiry
                        log.debug(f"portmap: conntrack delete failed: {exc}")
        finally:
            ct.close()
    except failures() as exc:
        log.warning(f"portmap: could not flush UDP conntrack entries for ports {sorted(wanted)}: {exc}")
    return deleted
