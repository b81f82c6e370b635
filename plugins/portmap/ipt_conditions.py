"""iptables-style ``conditionsV4``/``conditionsV6`` (the reference's default backend), translated.

The reference's iptables backend appends these argv tokens to the container's entry rule, e.g.
the reference README's ``["!", "-d", "192.0.2.0/24"]``.  This plugin programs nftables only, so a
documented subset is translated into the same libnftables JSON ``match`` objects that
:mod:`.conditions` produces for nft text, and the planner puts them in front of each DNAT rule of
the family.  Accepted (each token one list element, as iptables' argv)::

    [!] -s|--source ADDR[/LEN][,ADDR[/LEN]...]
    [!] -d|--destination ADDR[/LEN][,...]
    [!] -i|--in-interface NAME      (a trailing + is iptables' wildcard, nft's *)
    [!] -o|--out-interface NAME
    [!] -p|--protocol tcp|udp|sctp|icmp|icmpv6|ipv6-icmp|all|NUMBER
    [!] --dport|--destination-port PORT[:PORT]   (after -p tcp|udp|sctp)
    [!] --sport|--source-port PORT[:PORT]
    -m comment --comment TEXT       (dropped: a comment matches nothing)
    -m tcp|udp|sctp                 (the module --dport/--sport come from; no match of its own)

Anything else (another module, a target, ``-j``) is refused, and the error names the token.
Pure: no kernel access.
"""

from __future__ import annotations

import ipaddress

from .conditions import Refused, _ifname, _meta, _payload

TYPE_CHECKING = False
if TYPE_CHECKING:  # annotations only
    from typing import Any

_SOURCE = ("-s", "--source", "--src")
_DEST = ("-d", "--destination", "--dst")
_IN = ("-i", "--in-interface")
_OUT = ("-o", "--out-interface")
_PROTO = ("-p", "--protocol")
_DPORT = ("--dport", "--destination-port")
_SPORT = ("--sport", "--source-port")
_PORT_PROTOS = ("tcp", "udp", "sctp")
_PROTO_NAMES = {"tcp": "tcp", "udp": "udp", "sctp": "sctp", "icmp": "icmp", "icmpv6": "icmpv6", "ipv6-icmp": "icmpv6"}


def is_iptables_style(tokens: tuple[str, ...]) -> bool:
    """The reference's test (``detectBackendOfConditions``): the first token starts with ``-`` or ``!``."""
    return bool(tokens) and tokens[0][:1] in ("-", "!")


def _addresses(tok: str, family: int) -> Any:
    values: list[Any] = []
    for part in tok.split(","):
        try:
            net = ipaddress.ip_network(part, strict=False)
        except ValueError:
            raise Refused(f"{part!r} is not an IPv{family} address or prefix") from None
        if net.version != family:
            raise Refused(f"{part!r} is not an IPv{family} address or prefix")
        full = net.prefixlen == net.max_prefixlen
        values.append(str(net.network_address) if full else {"prefix": {"addr": str(net.network_address), "len": net.prefixlen}})
    return values[0] if len(values) == 1 else {"set": values}


def _ipt_ifname(tok: str) -> Any:
    return _ifname(tok[:-1] + "*" if tok.endswith("+") else tok)


def _ipt_port(tok: str) -> Any:
    lo, sep, hi = tok.partition(":")
    lo, hi = lo or "0", (hi or "65535") if sep else ""
    for p in (lo, hi) if sep else (lo,):
        if not p.isdigit() or int(p) > 65535:
            raise Refused(f"{tok!r} is not a port or port range")
    return {"range": [int(lo), int(hi)]} if sep else int(lo)


def _match(op: str, left: dict, right: Any) -> dict:
    return {"match": {"op": op, "left": left, "right": right}}


def translate(tokens: tuple[str, ...], family: int) -> list[dict]:
    """The iptables argv ``tokens`` as libnftables JSON matches (all must hold), in order;
    :class:`Refused` naming the first token outside the subset."""
    out: list[dict] = []
    proto = ""  # the -p protocol, which --dport/--sport need (as iptables does)
    i, n = 0, len(tokens)

    def value(opt: str) -> str:
        if i + 1 >= n:
            raise Refused(f"{opt!r} without a value")
        return tokens[i + 1]

    while i < n:
        tok = tokens[i]
        op = "=="
        if tok == "!":
            op = "!="
            i += 1
            if i >= n:
                raise Refused("'!' at the end")
            tok = tokens[i]
        if tok in _SOURCE or tok in _DEST:
            field_ = "saddr" if tok in _SOURCE else "daddr"
            out.append(_match(op, _payload("ip" if family == 4 else "ip6", field_), _addresses(value(tok), family)))
        elif tok in _IN or tok in _OUT:
            out.append(_match(op, _meta("iifname" if tok in _IN else "oifname"), _ipt_ifname(value(tok))))
        elif tok in _PROTO:
            name = value(tok).lower()
            if name == "all" and op == "==":
                proto = ""
            elif name in _PROTO_NAMES:
                if op == "==":
                    proto = _PROTO_NAMES[name]
                out.append(_match(op, _meta("l4proto"), _PROTO_NAMES[name]))
            elif name.isdigit() and int(name) <= 255:
                out.append(_match(op, _meta("l4proto"), int(name)))
            else:
                raise Refused(f"protocol {value(tok)!r} (token {tok!r})")
        elif tok in _DPORT or tok in _SPORT:
            if proto not in _PORT_PROTOS:
                raise Refused(f"{tok!r} needs -p tcp, udp or sctp before it")
            field_ = "dport" if tok in _DPORT else "sport"
            out.append(_match(op, _payload(proto, field_), _ipt_port(value(tok))))
        elif tok in ("-m", "--match") and op == "==":
            module = value(tok)
            if module == "comment":
                if i + 3 < n and tokens[i + 2] == "--comment":
                    i += 4
                    continue
                raise Refused("'-m comment' without '--comment TEXT'")
            if module not in _PORT_PROTOS:
                raise Refused(f"unsupported match module {module!r} (token {tok!r})")
        else:
            raise Refused(f"unsupported token {tok!r}")
        i += 2
    return out
