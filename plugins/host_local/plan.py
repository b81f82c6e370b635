"""Round-robin address allocation, exactly as the reference's ``IPAllocator``.

Kept free of I/O: it talks to a :class:`Store` (the disk store in production, a dict in tests), so
the iteration order, wrap-around, gateway skipping and the error texts can be tested without
files.  The caller holds the store lock around :func:`allocate`.
"""

from __future__ import annotations

from cnichain.common.errors import DUPLICATE_ALLOCATION, CniError, plugin_error
from cnichain.common.goip import canonical
from cnichain.common.kernel_errors import KernelError
from cnichain.common.record import FrozenRecord
from cnichain.common.rollback import Rollback

TYPE_CHECKING = False
if TYPE_CHECKING:  # annotations only: typing costs milliseconds on every host-local exec
    from typing import Iterator, Optional, Protocol

    from .config import IpamConfig
    from .ranges import IP, Range, RangeSet

    class Store(Protocol):
        """The reservation operations allocation needs (mirrors the reference's backend.Store)."""

        def reserve(self, container_id: str, ifname: str, ip: IP, range_id: str) -> bool:
            """Claim ``ip``; False if somebody holds it."""

        def last_reserved_ip(self, range_id: str) -> Optional[IP]:
            """The address last handed out from range set ``range_id``, if known."""

        def get_by_id(self, container_id: str, ifname: str) -> list[IP]:
            """Addresses held by this attachment (legacy id-only reservations included)."""

        def release_ip(self, ip: IP, container_id: str, ifname: str) -> None:
            """Undo one reservation this call made (used to roll back a failed ADD)."""


class Allocation(FrozenRecord):
    """One allocated address with the range it came from."""

    ip: IP
    range: Range

    @property
    def cidr(self) -> str:
        return f"{self.ip}/{self.range.subnet.prefixlen}"

    @property
    def gateway(self) -> str:
        return str(self.range.gateway)


def iterate(rangeset: RangeSet, last_reserved: Optional[IP]) -> Iterator[tuple[IP, Range]]:
    """Candidate addresses in the reference's round-robin order.

    Start right after the last reserved address when it lies in the set (so a crash-looping
    container does not get the same address back until the whole set was used), otherwise at the
    first range's start; walk to each range's end, continue with the next range, wrap around, stop
    when back at the first candidate.  Gateways are skipped.
    """
    ranges = rangeset.ranges
    idx = 0
    cur: Optional[int] = None
    if last_reserved is not None:
        for i, r in enumerate(ranges):
            if r.contains(last_reserved):
                idx, cur = i, int(canonical(last_reserved))
                break
    start: Optional[int] = None
    r = ranges[idx]
    if cur is None:
        cur = int(r.start)
        start = cur
        if not _is_gateway(r, cur):
            yield _ip(r, cur), r
    while True:
        r = ranges[idx]
        if cur == int(r.end):
            idx = (idx + 1) % len(ranges)
            r = ranges[idx]
            cur = int(r.start)
        else:
            cur += 1
        if start is None:
            start = cur
        elif cur == start:
            return
        if _is_gateway(r, cur):
            continue
        yield _ip(r, cur), r


def _is_gateway(r: Range, value: int) -> bool:
    return r.gateway.version == r.family and int(r.gateway) == value


def _ip(r: Range, value: int) -> IP:
    return type(r.start)(value)


def allocate_one(
    store: Store, rangeset: RangeSet, range_id: str, container_id: str, ifname: str, requested: Optional[IP]
) -> Allocation:
    """Go's ``IPAllocator.Get`` for one range set."""
    if requested is not None:
        requested = canonical(requested)
        r = rangeset.range_for(requested)
        if r is None:
            raise plugin_error(f"{requested} not in range set {rangeset}")
        if requested == r.gateway:
            raise plugin_error(f"requested ip {requested} is subnet's gateway")
        if not store.reserve(container_id, ifname, requested, range_id):
            raise plugin_error(
                f"requested IP address {requested} is not available in range set {rangeset}"
            )
        return Allocation(requested, r)

    for held in store.get_by_id(container_id, ifname):
        if rangeset.contains(held):
            raise plugin_error(
                f"{held} has been allocated to {container_id}, {DUPLICATE_ALLOCATION}"
            )
    for ip, r in iterate(rangeset, store.last_reserved_ip(range_id)):
        if store.reserve(container_id, ifname, ip, range_id):
            return Allocation(ip, r)
    raise plugin_error(f"no IP addresses available in range set: {rangeset}")


def allocate(store: Store, cfg: IpamConfig, container_id: str, ifname: str) -> list[Allocation]:
    """One address per range set, requested addresses first matched to the set containing them.

    All-or-nothing: on any failure the addresses taken by *this* call are released again (the
    reference releases every reservation of the attachment, including older ones; we only undo
    our own work).
    """
    pending: dict[str, IP] = {}
    for ip in cfg.requested_ips:
        pending.setdefault(str(ip), ip)
    done: list[Allocation] = []
    with Rollback() as undo:
        for idx, rangeset in enumerate(cfg.ranges):
            wanted = None
            for key, ip in pending.items():
                if rangeset.contains(ip):
                    wanted = ip
                    del pending[key]
                    break
            try:
                got = allocate_one(store, rangeset, str(idx), container_id, ifname, wanted)
            except (CniError, OSError) as exc:
                msg = exc.msg if isinstance(exc, CniError) else os_error_text(exc)
                raise plugin_error(f"failed to allocate for range {idx}: {msg}") from None
            done.append(got)
            undo.push(f"release {got.ip}", store.release_ip, got.ip, container_id, ifname)
        if pending:
            raise plugin_error(
                "failed to allocate all requested IPs: " + " ".join(pending)
            )
    return done


def os_error_text(exc: OSError) -> str:
    """Roughly Go's ``*PathError`` text: ``/path: permission denied`` (see common.kernel_errors)."""
    return KernelError.of(exc, str(exc.filename) if exc.filename else "").msg
