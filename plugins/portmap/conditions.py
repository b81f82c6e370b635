"""``conditionsV4``/``conditionsV6``: a documented subset of nft match expressions, parsed.

The reference's nftables backend splices these strings into its rules.  Here they are parsed into
known matches, each turned into a libnftables JSON ``match`` expression that the planner puts in
front of every DNAT rule of the family, so no character of the config reaches nft unchecked and
none is ever parsed by nft as text.  Accepted, one or more in a row (all must hold)::

    ip saddr|daddr [!=|==] <IPv4 address or prefix, or { set of them }>
    ip6 saddr|daddr [!=|==] <IPv6 address or prefix, or { set of them }>
    iifname|oifname [!=|==] <interface name, optionally quoted, optionally ending in *, not starting with @>
    meta l4proto [!=|==] <tcp|udp|sctp|icmp|icmpv6|number, or { set }>
    tcp|udp dport|sport [!=|==] <port, port-port, or { set }>

For example ``ip saddr 10.0.0.0/8`` becomes ``{"match": {"op": "==", "left": {"payload":
{"protocol": "ip", "field": "saddr"}}, "right": {"prefix": {"addr": "10.0.0.0", "len": 8}}}}``:
the form ``nft -j list`` prints for the same text.  Anything else is refused with an error naming
the key.  Pure: no kernel access.
"""

from __future__ import annotations

import ipaddress

from cnichain.common.errors import plugin_error

TYPE_CHECKING = False
if TYPE_CHECKING:  # annotations only: typing costs milliseconds per exec
    from typing import Any, Callable

    Value = Any  # a libnftables JSON value: str, int or a {"prefix"/"range": ...} object

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


def _address(version: int) -> Callable[[str], Value]:
    def parse(tok: str) -> Value:
        try:
            net = ipaddress.ip_network(tok, strict=False) if "/" in tok else ipaddress.ip_address(tok)
        except ValueError:
            raise Refused(f"{tok!r} is not an IPv{version} address or prefix") from None
        if net.version != version:
            raise Refused(f"{tok!r} is not an IPv{version} address or prefix")
        if isinstance(net, (ipaddress.IPv4Network, ipaddress.IPv6Network)):  # a prefix is its network
            return {"prefix": {"addr": str(net.network_address), "len": net.prefixlen}}
        return str(net)
    return parse


def _ifname(tok: str) -> Value:
    """The name, unquoted; a trailing ``*`` stays a wildcard as in nft's own syntax.

    A leading ``@`` is refused: libnftables' JSON parser reads any string starting with ``@`` as
    a reference to a named set, and has no escape for it.
    """
    name = tok[1:-1] if len(tok) >= 2 and tok[0] == tok[-1] == '"' else tok
    body = name[:-1] if name.endswith("*") else name
    if not body or len(body) > 15 or not set(body) <= _IFNAME_CHARS:
        raise Refused(f"{tok!r} is not an interface name")
    if name.startswith("@"):
        raise Refused(f"{tok!r} is not an interface name usable in a match (a leading @ names a set)")
    return name


def _l4proto(tok: str) -> Value:
    if tok in L4PROTOS:
        return tok
    if tok.isdigit() and 0 <= int(tok) <= 255:
        return int(tok)
    raise Refused(f"{tok!r} is not a layer 4 protocol")


def _port(tok: str) -> Value:
    parts = tok.split("-")
    if len(parts) > 2 or not all(p.isdigit() and int(p) <= 65535 for p in parts):
        raise Refused(f"{tok!r} is not a port or port range")
    ports = [int(p) for p in parts]
    return ports[0] if len(ports) == 1 else {"range": ports}


def _payload(protocol: str, field_: str) -> dict:
    return {"payload": {"protocol": protocol, "field": field_}}


def _meta(key: str) -> dict:
    return {"meta": {"key": key}}


# selector words -> (the expression it names, the parser of its values)
_SELECTORS: dict[tuple[str, ...], tuple[dict, Callable[[str], Value]]] = {
    ("ip", "saddr"): (_payload("ip", "saddr"), _address(4)),
    ("ip", "daddr"): (_payload("ip", "daddr"), _address(4)),
    ("ip6", "saddr"): (_payload("ip6", "saddr"), _address(6)),
    ("ip6", "daddr"): (_payload("ip6", "daddr"), _address(6)),
    ("iifname",): (_meta("iifname"), _ifname),
    ("oifname",): (_meta("oifname"), _ifname),
    ("meta", "l4proto"): (_meta("l4proto"), _l4proto),
    ("tcp", "dport"): (_payload("tcp", "dport"), _port),
    ("tcp", "sport"): (_payload("tcp", "sport"), _port),
    ("udp", "dport"): (_payload("udp", "dport"), _port),
    ("udp", "sport"): (_payload("udp", "sport"), _port),
}


def _value(toks: list[str], i: int, parse: Callable[[str], Value]) -> tuple[Value, int]:
    """One value or a ``{ a, b }`` set starting at ``toks[i]``; (JSON value, next index)."""
    if i >= len(toks):
        raise Refused("a match without a value")
    if toks[i] != "{":
        if toks[i] in ("}", ","):
            raise Refused(f"unexpected {toks[i]!r}")
        return parse(toks[i]), i + 1
    items: list[Value] = []
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
            return {"set": items}, i + 1
        raise Refused("malformed set")


def _selector_at(toks: list[str], i: int) -> tuple[int, dict, Callable[[str], Value]]:
    """The known selector starting at ``toks[i]``: (its length in words, its expression, the
    parser of its values)."""
    for selector, (left, value_parser) in _SELECTORS.items():
        if tuple(toks[i:i + len(selector)]) == selector:
            return len(selector), left, value_parser
    raise Refused(f"unsupported match {toks[i]!r}")


def parse(text: str) -> list[dict]:
    """``text``'s matches as libnftables JSON ``match`` expressions, in order; :class:`Refused`
    for anything else.  Without an operator a match is ``==`` (a set means "is one of")."""
    toks = _tokens(text)
    out: list[dict] = []
    i = 0
    while i < len(toks):
        width, left, value_parser = _selector_at(toks, i)
        i += width
        op = "=="
        if i < len(toks) and toks[i] in ("!=", "=="):
            op = toks[i]
            i += 1
        value, i = _value(toks, i, value_parser)
        out.append({"match": {"op": op, "left": left, "right": value}})
    return out


def validated(tokens: tuple[str, ...], key: str) -> tuple[dict, ...]:
    """``tokens`` (the config's list) as JSON match expressions, or a config error."""
    joined = " ".join(tokens)
    try:
        return tuple(parse(joined)) if joined else ()
    except Refused as exc:
        raise plugin_error(
            f"failed to parse config: {key} is not a single nftables match expression: {joined!r}",
            f"{exc}; supported: ip/ip6 saddr|daddr, iifname, oifname, meta l4proto, tcp/udp dport|sport",
        ) from None


def _text_of(value: Value, quoted: bool) -> str:
    if isinstance(value, dict) and isinstance(value.get("set"), list):
        return "{ " + ", ".join(_text_of(v, quoted) for v in value["set"]) + " }"
    if isinstance(value, dict) and isinstance(value.get("prefix"), dict):
        return f"{value['prefix'].get('addr')}/{value['prefix'].get('len')}"
    if isinstance(value, dict) and isinstance(value.get("range"), list):
        return "-".join(str(v) for v in value["range"])
    return f'"{value}"' if quoted and isinstance(value, str) else str(value)


def render(exprs: list[dict]) -> str:
    """The nft text of ``exprs`` as :func:`parse` reads it (the inverse, as ``nft list`` prints
    the same matches); an expression outside the subset is shown as its JSON."""
    import json

    selectors = {json.dumps(left, sort_keys=True): words for words, (left, _) in _SELECTORS.items()}
    out = []
    for expr in exprs:
        match = expr.get("match") if isinstance(expr, dict) else None
        words = selectors.get(json.dumps(match.get("left"), sort_keys=True)) if isinstance(match, dict) else None
        if not isinstance(match, dict) or words is None or match.get("op") not in ("==", "!="):
            out.append(json.dumps(expr, sort_keys=True))
            continue
        op = "" if match["op"] == "==" else "!= "
        out.append(f"{' '.join(words)} {op}{_text_of(match.get('right'), words[-1].endswith('ifname'))}")
    return " ".join(out)
