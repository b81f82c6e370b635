"""host-local's address ranges: the canonical range and range set the allocator walks, and Go's
``Range.Canonicalize`` / ``RangeSet.Canonicalize`` that turn a range as written into one.

Pure, like the allocator beside it (:mod:`.plan`): the config loader hands each written range here
and gets the canonical set back, or the reference's error text (``Network has host bits set...``).
"""

from __future__ import annotations

import ipaddress

from cnichain.common.errors import CniError, plugin_error
from cnichain.common.goip import canonical
from cnichain.common.record import FrozenRecord

TYPE_CHECKING = False
if TYPE_CHECKING:  # annotations only
    from typing import Iterable, Optional, Union

    IP = Union[ipaddress.IPv4Address, ipaddress.IPv6Address]
    Network = Union[ipaddress.IPv4Network, ipaddress.IPv6Network]


class Range(FrozenRecord):
    """One canonical range: every field filled in, start/end inclusive, gateway never handed out."""

    subnet: Network
    gateway: IP
    start: IP
    end: IP

    @property
    def family(self) -> int:
        return self.subnet.version

    def contains(self, ip: IP) -> bool:
        """Go's ``Range.Contains``: same family, inside the subnet and within [start, end]."""
        ip = canonical(ip)
        if ip.version != self.subnet.version or ip not in self.subnet:
            return False
        return int(self.start) <= int(ip) <= int(self.end)

    def overlaps(self, other: "Range") -> bool:
        if self.family != other.family:
            return False
        return (
            self.contains(other.start)
            or self.contains(other.end)
            or other.contains(self.start)
            or other.contains(self.end)
        )

    def __str__(self) -> str:
        return f"{self.start}-{self.end}"


class RangeSet(FrozenRecord):
    """A pool of disjoint same-family ranges; one address is allocated per range set."""

    ranges: tuple[Range, ...]

    @property
    def family(self) -> int:
        return self.ranges[0].family

    def range_for(self, ip: IP) -> Optional[Range]:
        for r in self.ranges:
            if r.contains(ip):
                return r
        return None

    def contains(self, ip: IP) -> bool:
        return self.range_for(ip) is not None

    def overlaps(self, other: "RangeSet") -> bool:
        return any(a.overlaps(b) for a in self.ranges for b in other.ranges)

    def __str__(self) -> str:
        return ",".join(str(r) for r in self.ranges)


class RawRange(FrozenRecord):
    """A range as written, before canonicalisation (every field optional)."""

    subnet: Optional[tuple[IP, int, int]] = None
    start: Optional[IP] = None
    end: Optional[IP] = None
    gateway: Optional[IP] = None

    @classmethod
    def from_decoded(cls, d: dict) -> "RawRange":
        """From a dict decoded with ``config.RANGE`` (or the range fields of ``config.IPAM_CONFIG``).

        The subnet becomes (canonical address, prefix, bits of the written family): the width of
        the mask as written (128 for ``::ffff:10.0.0.0/120``), which the reference compares with
        the canonical address to report a version mismatch.
        """
        iface = d["subnet"]
        subnet = None
        if iface is not None:
            subnet = (canonical(iface.ip), iface.network.prefixlen, iface.max_prefixlen)
        return cls(subnet, d["rangeStart"], d["rangeEnd"], d["gateway"])


def _last_ip(net: Network) -> IP:
    """The default range end: IPv4 broadcast minus one; IPv6 the all-ones address itself."""
    last = net.broadcast_address
    return last - 1 if net.version == 4 else last


def canonicalize_range(raw: RawRange) -> Range:
    """Go's ``Range.Canonicalize``, same checks in the same order, same messages."""
    if raw.subnet is None:
        raise plugin_error("IP <nil> not v4 nor v6")
    ip, prefix, bits = raw.subnet
    if prefix > bits - 2:
        raise plugin_error(f"Network {ip}/{prefix} too small to allocate from")
    if ip.max_prefixlen != bits:
        raise plugin_error("IPNet IP and Mask version mismatch")
    net = ipaddress.ip_network(f"{ip}/{prefix}", strict=False)
    if net.network_address != ip:
        raise plugin_error(
            f"Network has host bits set. For a subnet mask of length {prefix} "
            f"the network address is {net.network_address}"
        )
    first = net.network_address + 1
    gateway = raw.gateway if raw.gateway is not None else first
    # The reference validates with Range.Contains on the half-built range: a bound that was not
    # written is still nil and skipped, a written rangeEnd already bounds rangeStart.
    if raw.start is not None:
        if not _in_open_range(raw.start, net, None, raw.end):
            raise plugin_error(f"RangeStart {raw.start} not in network {net}")
        start = raw.start
    else:
        start = first
    if raw.end is not None:
        if not _in_open_range(raw.end, net, start, None):
            raise plugin_error(f"RangeEnd {raw.end} not in network {net}")
        end = raw.end
    else:
        end = _last_ip(net)
    return Range(subnet=net, gateway=gateway, start=start, end=end)


def _in_open_range(ip: IP, net: Network, start: Optional[IP], end: Optional[IP]) -> bool:
    if ip.version != net.version or ip not in net:
        return False
    if start is not None and int(ip) < int(start):
        return False
    if end is not None and int(ip) > int(end):
        return False
    return True


def canonicalize_range_set(raws: list[RawRange]) -> RangeSet:
    """Go's ``RangeSet.Canonicalize``: non-empty, one family, no overlap inside the set."""
    if not raws:
        raise plugin_error("empty range set")
    ranges: list[Range] = []
    for raw in raws:
        r = canonicalize_range(raw)
        if ranges and r.family != ranges[0].family:
            raise plugin_error("mixed address families")
        ranges.append(r)
    for i, r1 in enumerate(ranges):
        for r2 in ranges[i + 1 :]:
            if r1.overlaps(r2):
                raise plugin_error(f"subnets {r1} and {r2} overlap")
    return RangeSet(tuple(ranges))


def canonicalize_range_sets(raw_sets: list[list[RawRange]]) -> tuple[RangeSet, ...]:
    """``LoadIPAMConfig``'s loop: every set canonical, its error prefixed with the set's index."""
    sets: list[RangeSet] = []
    for i, raws in enumerate(raw_sets):
        try:
            sets.append(canonicalize_range_set(raws))
        except CniError as exc:
            raise plugin_error(f"invalid range set {i}: {exc.msg}") from None
    return tuple(sets)


def most_per_family(sets: Iterable[RangeSet]) -> int:
    """The larger of the IPv4 and IPv6 range-set counts (one address per range set)."""
    counts = {4: 0, 6: 0}
    for s in sets:
        counts[s.family] += 1
    return max(counts.values())


def require_disjoint(sets: tuple[RangeSet, ...]) -> None:
    """No two range sets may overlap (each hands out one address of the attachment)."""
    for i, s1 in enumerate(sets):
        for j in range(i + 1, len(sets)):
            if s1.overlaps(sets[j]):
                raise plugin_error(f"range set {i} overlaps with {j}")
