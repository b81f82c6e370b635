"""IP text as Go reads it: ``net.ParseIP``, ``net.ParseCIDR`` and the plugins repo's ``ip.ParseIP``.

One parser for every reader, because what Go accepts is the contract: the decoder's ``net.IP`` and
``types.IPNet`` fields (:mod:`cnichain.common.gojson`), host-local's requested addresses and its
reservation file names, and the node tools that read those files must agree on what is an address.
The rules, on top of :mod:`ipaddress` (which already refuses IPv4 octets with leading zeros, as Go
1.17 on does):

* a zone (``fe80::1%eth0``) is never an address, and ``net.ParseIP`` takes no prefix;
* an IPv4-mapped IPv6 address *is* the IPv4 address (Go's 4-in-16 form), see :func:`canonical`;
* a CIDR has exactly one ``/`` and a prefix of ASCII digits, leading zeros allowed (Go's ``dtoi``:
  ``/024`` is ``/24``), no wider than the family of the address as written (``::ffff:10.0.0.0/120``
  is an IPv6 prefix).

Each parser returns None for text Go refuses: the callers word their own errors, as the reference
does (``invalid IP address: X`` in the decoder, ``invalid IP address X`` for ``ip.IP``).  The
module is imported only where an address is parsed: ``ipaddress`` costs an import on each exec.
"""

from __future__ import annotations

import ipaddress

TYPE_CHECKING = False
if TYPE_CHECKING:  # annotations only: typing costs milliseconds per exec
    from typing import Any, Optional, Union

    IP = Union[ipaddress.IPv4Address, ipaddress.IPv6Address]
    Interface = Union[ipaddress.IPv4Interface, ipaddress.IPv6Interface]


def canonical(ip: IP) -> IP:
    """Go's ``canonicalizeIP``: an IPv4-mapped IPv6 address is the IPv4 address."""
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        return ip.ipv4_mapped
    return ip


def parse_ip(text: Any) -> Optional[IP]:
    """``net.ParseIP``: a bare address (no zone, no prefix), canonical; None if it is not one."""
    if not isinstance(text, str) or not text or "%" in text or "/" in text:
        return None
    try:
        return canonical(ipaddress.ip_address(text))
    except ValueError:
        return None


def parse_cidr(text: Any) -> Optional[Interface]:
    """``net.ParseCIDR`` keeping the host part: ``10.1.0.5/16`` is ``IPv4Interface('10.1.0.5/16')``.

    The address is kept as written (``::ffff:10.0.0.1/120`` stays an IPv6 interface), so a caller
    can compare the mask's width with the canonical address, as host-local's range checks do.
    """
    if not isinstance(text, str) or text.count("/") != 1:
        return None
    addr, prefix = text.split("/")
    digits = prefix.lstrip("0") or "0"  # more than three significant digits is wider than any family
    if "%" in addr or not prefix.isascii() or not prefix.isdigit() or len(digits) > 3:
        return None
    try:
        raw = ipaddress.ip_address(addr)
    except ValueError:
        return None
    length = int(digits)
    if length > raw.max_prefixlen:
        return None
    return ipaddress.ip_interface((raw, length))


def parse_ip_or_cidr(text: Any) -> Optional[IP]:
    """The plugins repo's ``ip.ParseIP``: ``10.1.2.3`` or ``10.1.2.3/24``, the canonical address."""
    if isinstance(text, str) and "/" in text:
        iface = parse_cidr(text)
        return canonical(iface.ip) if iface is not None else None
    return parse_ip(text)
