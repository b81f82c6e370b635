"""``conditionsV4``/``conditionsV6``: a documented subset of nft match expressions, parsed.

The reference's nftables backend splices these strings into its rules.  Here they are parsed into
known matches and the rule text is rebuilt from the parse, so no character of the config reaches
nft unchecked.  Accepted, one or more in a row (all must hold)::

    ip saddr|daddr [!=|==] <IPv4 address or prefix, or { set of them }>
    ip6 saddr|daddr [!=|==] <IPv6 address or prefix, or { set of them }>
    iifname|oifname [!=|==] <interface name, optionally quoted, optionally ending in *>
    meta l4proto [!=|==] <tcp|udp|sctp|icmp|icmpv6|number, or { set }>
    tcp|udp dport|sport [!=|==] <port, port-port, or { set }>

Anything else is refused with an error naming the key.  Pure: no kernel access.
"""

from __future__ import annotations

import ipaddress

from cnichain.common.errors import plugin_error

TYPE_CHECKING = False
if TYPE_CHECKING:  # annotations only: typing costs milliseconds per exec
    from typing import Callable

L4PROTOS = ("tcp", "udp", "sctp", "icmp", "icmpv6")
_IFNAME_CHARS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_.-@:+")


class Refused(ValueError):
    """A condition outside the subset; the message says which part."""


def _tokens(text: str) -> list[str]:
    """Split into words, ``{``, ``}``, ``,``, ``!=``/``==`` and double-quoted strings."""
    out: list[str] = []
    i, n = 0, len(text)
    while i < n:
        ch = text[i]
        if ch == " " or ch == "\t":
            i += 1
        elif ch in "{},":
            out.append(ch)
            i += 1
        elif ch == '"':
            end = text.find('"', i + 1)
            if end < 0:
                raise Refused("unterminated quoted string")
            out.append(text[i:end + 1])
            i = end + 1
        else:
            j = i
            while j < n and text[j] not in ' \t{},"':
                j += 1
            out.append(text[i:j])
            i = j
    return out


def _address(version: int) -> Callable[[str], str]:
    def parse(tok: str) -> str:
        try:
            net = ipaddress.ip_network(tok, strict=False) if "/" in tok else ipaddress.ip_address(tok)
        except ValueError:
            raise Refused(f"{tok!r} is not an IPv{version} address or prefix") from None
        if net.version != version:
            raise Refused(f"{tok!r} is not an IPv{version} address or prefix")
        return str(net)
    return parse


def _ifname(tok: str) -> str:
    name = tok[1:-1] if len(tok) >= 2 and tok[0] == tok[-1] == '"' else tok
    body = name[:-1] if name.endswith("*") else name
    if not body or len(body) > 15 or not set(body) <= _IFNAME_CHARS:
        raise Refused(f"{tok!r} is not an interface name")
    return f'"{name}"'


def _l4proto(tok: str) -> str:
    if tok in L4PROTOS:
        return tok
    if tok.isdigit() and 0 <= int(tok) <= 255:
        return str(int(tok))
    raise Refused(f"{tok!r} is not a layer 4 protocol")


def _port(tok: str) -> str:
    parts = tok.split("-")
    if len(parts) > 2 or not all(p.isdigit() and int(p) <= 65535 for p in parts):
        raise Refused(f"{tok!r} is not a port or port range")
    return "-".join(str(int(p)) for p in parts)


_SELECTORS: dict[tuple[str, ...], Callable[[str], str]] = {
    ("ip", "saddr"): _address(4),
    ("ip", "daddr"): _address(4),
    ("ip6", "saddr"): _address(6),
    ("ip6", "daddr"): _address(6),
    ("iifname",): _ifname,
    ("oifname",): _ifname,
    ("meta", "l4proto"): _l4proto,
    ("tcp", "dport"): _port,
    ("tcp", "sport"): _port,
    ("udp", "dport"): _port,
    ("udp", "sport"): _port,
}


def _value(toks: list[str], i: int, parse: Callable[[str], str]) -> tuple[str, int]:
    """One value or a ``{ a, b }`` set starting at ``toks[i]``; (canonical text, next index)."""
    if i >= len(toks):
        raise Refused("a match without a value")
    if toks[i] != "{":
        if toks[i] in ("}", ","):
            raise Refused(f"unexpected {toks[i]!r}")
        return parse(toks[i]), i + 1
    items: list[str] = []
    i += 1
    while True:
        if i >= len(toks) or toks[i] in ("{", "}", ","):
            raise Refused("malformed set")
        items.append(parse(toks[i]))
        i += 1
        if i < len(toks) and toks[i] == ",":
            i += 1
            continue
        if i < len(toks) and toks[i] == "}":
            return "{ " + ", ".join(items) + " }", i + 1
        raise Refused("malformed set")


def _selector_at(toks: list[str], i: int) -> tuple[tuple[str, ...], Callable[[str], str]]:
    """The known selector starting at ``toks[i]`` and the parser of its values."""
    for selector, value_parser in _SELECTORS.items():
        if tuple(toks[i:i + len(selector)]) == selector:
            return selector, value_parser
    raise Refused(f"unsupported match {toks[i]!r}")


def parse(text: str) -> str:
    """The canonical nft text of ``text``'s matches; :class:`Refused` for anything else."""
    toks = _tokens(text)
    out: list[str] = []
    i = 0
    while i < len(toks):
        selector, value_parser = _selector_at(toks, i)
        i += len(selector)
        op = ""
        if i < len(toks) and toks[i] in ("!=", "=="):
            op = toks[i] + " "
            i += 1
        value, i = _value(toks, i, value_parser)
        out.append(f"{' '.join(selector)} {op}{value}")
    return " ".join(out)


def validated(tokens: tuple[str, ...], key: str) -> tuple[str, ...]:
    """``tokens`` (the config's list) rebuilt as canonical match text, or a config error."""
    joined = " ".join(tokens)
    try:
        return (parse(joined),) if joined else ()
    except Refused as exc:
        raise plugin_error(
            f"failed to parse config: {key} is not a single nftables match expression: {joined!r}",
            f"{exc}; supported: ip/ip6 saddr|daddr, iifname, oifname, meta l4proto, tcp/udp dport|sport",
        ) from None
