"""Every kernel effect of portmap: its nftables table, route_localnet and the UDP/SCTP conntrack flush.

nftables goes through libnftables' JSON API (:mod:`cnichain.common.nft`, one handle per process):
every change is one list of JSON commands built by :mod:`.maps`, :mod:`.plan` or :mod:`.rebuild`,
applied as one atomic transaction.  ADD and DEL first try their fast path: one transaction that
lists nothing and that the kernel refuses as a whole when the table's state is not what it
assumes (an element holding another value, a key the other layout claims, no table yet).  Then
the slow path runs: under a lock held on the network namespace itself (so it serialises exactly
the plugins working on this namespace, and needs no file on disk), it lists our table once and
rebuilds the keys involved (:mod:`.rebuild`).

route_localnet and the interface routing to the pod need no pyroute2: the route is found in
``/proc/net/route`` of the calling thread's namespace.  The conntrack flush does need netlink and
imports pyroute2 only when there are UDP or SCTP mappings: at ADD (as the reference) and at DEL
(which the reference does not do, so a client's UDP keeps going to a deleted pod).
"""

from __future__ import annotations

import errno
import fcntl
import ipaddress
import os
import time

from cnichain.common import nft, sysctl
from cnichain.common.errors import CniError, plugin_error
from cnichain.common.kernel_errors import NftError, failures
from cnichain.common.log import log

from . import maps, names
from .plan import config_delete, declarations, fast_add
from .rebuild import Snapshot, rebuild

TYPE_CHECKING = False
if TYPE_CHECKING:  # annotations only
    from typing import Callable, Optional

    from cnichain.common.types import Result

    from .listing import HeldMapping
    from .plan import OwnerPlan

ATTEMPTS = 6
# libnftables refusals that a rebuild under the lock can get past: a key or chain someone else
# just created (EEXIST) or deleted (ENOENT), or a chain still jumped to (EBUSY).
_RETRYABLE = (errno.EEXIST, errno.ENOENT, errno.EBUSY)


def _retryable(exc: NftError) -> bool:
    return exc.errno in _RETRYABLE


def _apply(commands: list[dict]) -> None:
    """One transaction: all of ``commands`` or, raising :class:`NftError`, none of them."""
    nft.apply(commands, "nft")


def _list(what: str) -> Optional[list[dict]]:
    try:
        return nft.list_ruleset(f"list {what}")
    except CniError as exc:  # NftError, or the binding missing
        raise plugin_error(f"could not list rules in table {names.TABLE}: {exc}") from None


class _netns_lock:
    """An exclusive flock on this thread's network namespace inode (released on close).

    A small class, not a ``contextlib`` generator: see :mod:`cnichain.common.netns`.
    """

    __slots__ = ("fd",)

    def __enter__(self) -> None:
        fd = os.open("/proc/thread-self/ns/net", os.O_RDONLY | os.O_CLOEXEC)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
        except BaseException:
            os.close(fd)
            raise
        self.fd = fd

    def __exit__(self, *exc_info: object) -> None:
        os.close(self.fd)


def snapshot() -> Optional[Snapshot]:
    objs = _list(f"table {names.FAMILY_TABLE}")
    return None if objs is None else Snapshot.from_json(objs)


def listed_mappings() -> list[HeldMapping]:
    """Every container's port mappings as our table holds them ([] when there is no table): the
    read-only view of a node (``cnichain inspect``), read as the plugin reads its own rules."""
    from .listing import mappings_in

    objs = _list(f"table {names.FAMILY_TABLE}")
    return [] if objs is None else mappings_in(objs)


def _slow(build: Callable[[Snapshot], list[dict]], declare: bool = False) -> None:
    """Under the namespace lock: list, ``build`` the transaction (empty: nothing to do), apply;
    again from a fresh listing when a concurrent fast path got in between.  ``declare``: the
    transaction holds the skeleton, so the table and its target maps are declared first."""
    last = ""
    with _netns_lock():
        for attempt in range(ATTEMPTS):
            snap = snapshot() or Snapshot()
            commands = build(snap)
            if not commands:
                return
            try:
                if declare:
                    nft.apply_text(declarations(), "nft declarations")
                _apply(commands)
                return
            except NftError as exc:
                last = exc.text
                if not _retryable(exc):
                    break
                time.sleep(0.005 * (attempt + 1))
    raise plugin_error(f"unable to set up nftables rules for port mappings: {last}")


def install(plan: OwnerPlan) -> None:
    """ADD: one transaction (the map layout's claim, or the chain layout's for a config with
    conditions); the slow path when the kernel refuses it."""
    try:
        _apply(fast_add(plan) if plan.conditioned else maps.claim(plan))
        return
    except NftError as exc:
        log.debug(f"portmap: fast ADD for {plan.owner} refused ({exc.text.splitlines()[0]}); rebuilding")
    _slow(lambda snap: rebuild(snap, add=plan), declare=True)


def holds(owner: str) -> bool:
    """Whether our table may hold anything of this container, without listing it: any listing of
    our table makes libnftables fetch every element of its maps (350 ms at 10,000 pods), while a
    transaction's element commands do not.  So its OWNERS element is probed by a transaction the
    kernel refuses (EEXIST) when it is there and that otherwise leaves no trace.  No OWNERS map
    (ENOENT: no table, or one the previous release wrote and no ADD has upgraded) cannot tell:
    True, and the caller lists (cheap when there is no table)."""
    try:
        _apply(maps.presence_probe(owner))
    except NftError as exc:
        if exc.errno in (errno.EEXIST, errno.ENOENT):
            return True
        raise plugin_error(f"could not look for the rules of {owner} in table {names.TABLE}: {exc.text}") from None
    return False


def remove(owner: str, plan: Optional[OwnerPlan] = None) -> list[str]:
    """DEL: with the ``plan`` the config describes, one self-checking transaction per layout and
    no listing (see :mod:`.maps` and :func:`.plan.config_delete`); otherwise, or when the kernel
    holds something else for this container, the slow path.  Returns the DNAT keys the container
    held (for the conntrack flush), empty when it held none."""
    if plan is not None:
        refused = ""
        for commands in [config_delete(plan)] if plan.conditioned else [maps.release(plan), config_delete(plan)]:
            try:
                _apply(commands)
                return list(plan.dnat_keys)
            except NftError as exc:
                refused = exc.text.splitlines()[0]
        log.debug(f"portmap: DEL from config for {owner} refused ({refused}); listing")
    elif not holds(owner):
        return []  # a pod without hostPorts, or one already deleted: no listing for it
    held: list[str] = []

    def build(snap: Snapshot) -> list[dict]:
        held[:] = [k for k in snap.map_keys(owner) + snap.keys(owner)[0] if not k.startswith("masq/")]
        return rebuild(snap, remove=[owner])

    _slow(build)
    return list(dict.fromkeys(held))


def remove_reference_rules(network: str, container_id: str) -> None:
    """Swap in place: the hostPort rules the reference portmap (iptables or nftables backend)
    made for this container, found by its own tags (see :mod:`cnichain.common.reference_rules`)."""
    from cnichain.common import reference_rules

    done = reference_rules.remove(
        reference_rules.portmap_target(network, container_id), f"remove the reference portmap rules of {container_id}"
    )
    if done:
        log.info(f"portmap: removed {len(done)} nftables objects the reference portmap left for {container_id}")


def reference_rules_present(network: str, container_id: str) -> bool:
    """The reference portmap's rules for this container are in place (a pod it set up)."""
    from cnichain.common import reference_rules

    return reference_rules.present(reference_rules.portmap_target(network, container_id))


def remove_many(select: Callable[[Snapshot], list[str]]) -> None:
    """GC: remove every owner ``select(snapshot)`` returns, in one transaction."""
    _slow(lambda snap: rebuild(snap, remove=select(snap)) if select(snap) else [])


# -- host side: route_localnet and conntrack ----------------------------------------------------


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


# Connectionless protocols: a conntrack entry made before a mapping changed keeps steering a
# client's datagrams to where they went before (un-NATed, or to a deleted pod) for as long as the
# client keeps sending.  TCP needs no flush: a new connection is a new entry.
CONNTRACK_PROTOCOLS = ("udp", "sctp")


def flush_conntrack(family: int, protocol: str, ports: list[int], pod_ips: Optional[set[str]] = None) -> int:
    """Delete conntrack entries of ``protocol`` flows to host ``ports`` so they re-evaluate the DNAT.

    ADD flushes every entry to the port: a client that kept sending before the pod existed (or
    while another pod had the port) is otherwise pinned to the stale entry.  DEL passes the
    deleted pod's ``pod_ips`` and flushes only the flows DNATed to it (their reply comes from the
    pod), so flows to another pod sharing the port keep going.  Through netlink (pyroute2's
    conntrack socket).  Failures are logged, never fatal (as in the reference).  Returns the
    number of entries deleted.
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
        proto = socket.IPPROTO_UDP if protocol == "udp" else socket.IPPROTO_SCTP
        ct = Conntrack()
        try:
            for port in sorted(wanted):
                match = NFCTAttrTuple(family=fam, proto=proto, dport=port)
                for entry in list(ct.dump_entries(tuple_orig=match)):
                    orig = entry.tuple_orig
                    if orig.proto != proto or orig.dport != port:
                        continue
                    if pod_ips is not None and getattr(entry.tuple_reply, "saddr", None) not in pod_ips:
                        continue
                    try:
                        ct.entry("del", tuple_orig=orig)
                        deleted += 1
                    except failures() as exc:  # raced with expiry
                        log.debug(f"portmap: conntrack delete failed: {exc}")
        finally:
            ct.close()
    except failures() as exc:
        log.warning(f"portmap: could not flush {protocol} conntrack entries for ports {sorted(wanted)}: {exc}")
    return deleted


def nft_unusable() -> Optional[str]:
    """Why portmap's nftables family cannot be worked with (None: it can)."""
    from cnichain.common.nft import unusable_reason

    return unusable_reason(names.FAMILY)
