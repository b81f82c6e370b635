"""Names in portmap's nftables table: the table and maps, per-container chain names, dispatch keys.

A container is known by a hash of network name and container ID (its *owner* id), so chain names
stay short and fixed-length whatever the IDs look like.  A *dispatch key* is a short token kept in
rule comments (``any/4/tcp/8080``, ``ip/192.0.2.1/udp/53``, ``masq/10.0.0.2``) from which the map
and the element's libnftables JSON key are derived, and which listing maps back.  Pure: no kernel access.
"""

from __future__ import annotations

TYPE_CHECKING = False
if TYPE_CHECKING:  # annotations only: typing costs milliseconds per exec
    from typing import Any, Iterable, Optional

    from .config import PortMapping

FAMILY = "inet"
TABLE = "cnichain_portmap"
FAMILY_TABLE = f"{FAMILY} {TABLE}"  # how nft commands name the table: "inet cnichain_portmap"
TABLE_COMMENT = "cnichain portmap: hostPort DNAT and hairpin masquerade"
DSTNAT_PRIORITY = -100
SRCNAT_PRIORITY = 95  # just before srcnat so bridge/ptp masquerade rules cannot pre-empt hairpin
# The chain layout: verdict maps dispatching a key to the chain of the container that claims it
# (``c-<owner>``, ``m-<owner>``), or to a ``b-<key>`` chain while several claim it.
MAPS = {  # verdict maps: name -> key types (concatenated when several)
    "dnat_any": ["nf_proto", "inet_proto", "inet_service"],
    "dnat_ip4": ["ipv4_addr", "inet_proto", "inet_service"],
    "dnat_ip6": ["ipv6_addr", "inet_proto", "inet_service"],
    "masq4": ["ipv4_addr"],
    "masq6": ["ipv6_addr"],
}

# The map layout: no chain per container.  A key's DNAT target (pod address . port) is one element
# of a data map, its owner one element of an ownership map keyed the same way as the verdict map
# above, hairpin and masquerade one set element per pod address, and every container one element
# of OWNERS (owner -> digest of what it installed, comment: its identity).  Owners and digests are
# 128-bit hashes written as IPv6 addresses, the one 128-bit data type a map value can have.
OWNERS = "owners"
OWNER_TYPE = "ipv6_addr"
CHAIN_LAYOUT = "0" * 32  # the digest OWNERS holds for a container in the chain layout
OWN_MAPS = {  # verdict map of the chain layout -> ownership map of the same keys
    "dnat_any": "own_any", "dnat_ip4": "own_ip4", "dnat_ip6": "own_ip6", "masq4": "own_masq4", "masq6": "own_masq6",
}
TO_MAPS = {  # (key kind, family) -> DNAT target map: key types, target types
    ("any", 4): ("to_any4", ["inet_proto", "inet_service"], ["ipv4_addr", "inet_service"]),
    ("any", 6): ("to_any6", ["inet_proto", "inet_service"], ["ipv6_addr", "inet_service"]),
    ("ip", 4): ("to_ip4", ["ipv4_addr", "inet_proto", "inet_service"], ["ipv4_addr", "inet_service"]),
    ("ip", 6): ("to_ip6", ["ipv6_addr", "inet_proto", "inet_service"], ["ipv6_addr", "inet_service"]),
}
# Masquerade sets, per family: hairpin (daddr . saddr: the pod to itself, and IPv4 localhost to
# the pod) and masqAll (daddr: every DNATed connection to the pod).
HAIRPIN = {4: "hairpin4", 6: "hairpin6"}
MASQ_ALL = {4: "masqall4", 6: "masqall6"}
SETS = {  # set name -> element type
    HAIRPIN[4]: ["ipv4_addr", "ipv4_addr"], HAIRPIN[6]: ["ipv6_addr", "ipv6_addr"],
    MASQ_ALL[4]: ["ipv4_addr"], MASQ_ALL[6]: ["ipv6_addr"],
}
LOCALHOST4 = "127.0.0.1"
ID_PREFIX = "id "
COMMENT_MAX = 128


# -- names -----------------------------------------------------------------------------------


_SHA256: Any = None  # the constructor, found once per process


def _sha256():  # -> a new SHA-256 hash object
    """``hashlib.sha256()`` without importing ``hashlib`` when CPython's own SHA-256 is built in.

    ``import hashlib`` loads OpenSSL's libcrypto through ``_hashlib`` (~2 ms, every ADD and DEL);
    the built-in module it otherwise falls back to imports in ~30 µs and computes the same
    digest.  It is ``_sha2`` since Python 3.12 and ``_sha256`` before; anything else uses hashlib.
    The constructor is kept: a failed import is not cached by Python, so looking again would
    search ``sys.path`` for ``_sha2`` on every call (a warm worker hashes several times a request).
    """
    global _SHA256
    if _SHA256 is None:
        try:
            from _sha2 import sha256
        except ImportError:
            try:
                from _sha256 import sha256
            except ImportError:
                from hashlib import sha256
        _SHA256 = sha256
    return _SHA256()


def _digest(*parts: str) -> str:
    h = _sha256()
    for p in parts:
        h.update(p.encode())
        h.update(b"\0")
    return h.hexdigest()


def owner_id(network: str, container_id: str) -> str:
    """The container's identity in chain names: a hash of network name and container ID."""
    return _digest("portmap", network, container_id)[:32]


def as_addr(hex128: str) -> str:
    """A 128-bit hash (32 hex digits) as the IPv6 address text nft prints for it."""
    import ipaddress

    return ipaddress.IPv6Address(int(hex128, 16)).compressed


def from_addr(text: str) -> str:
    """The 32 hex digits of a 128-bit value nft printed as an IPv6 address ("" if it is not one)."""
    import ipaddress

    try:
        return f"{int(ipaddress.IPv6Address(text)):032x}"
    except ValueError:
        return ""


def plan_digest(entries: Iterable[str]) -> str:
    """The digest of what a container installed in the map layout (its entries, in any order)."""
    return _digest("entries", *sorted(entries))[:32]


def network_digest(network: str) -> str:
    """12 hex of a hash of the network name: the first word of every identity comment, by which
    GC finds one network's containers (not the bridge plugin's unrelated ``network_tag``)."""
    return _digest("network", network)[:12]


# The prefixes of the chains made per container (DNAT, masquerade) and per hash bucket; what
# starts with one of them in our table is ours to rebuild, list or remove.
DNAT_CHAIN_PREFIX, MASQ_CHAIN_PREFIX, BUCKET_CHAIN_PREFIX = "c-", "m-", "b-"
OWNED_CHAIN_PREFIXES = (DNAT_CHAIN_PREFIX, MASQ_CHAIN_PREFIX, BUCKET_CHAIN_PREFIX)


def dnat_chain(owner: str) -> str:
    return f"{DNAT_CHAIN_PREFIX}{owner}"


def masq_chain(owner: str) -> str:
    return f"{MASQ_CHAIN_PREFIX}{owner}"


def bucket_chain(key: str) -> str:
    return f"{BUCKET_CHAIN_PREFIX}{_digest('bucket', key)[:32]}"


def identity_comment(network: str, container_id: str) -> str:
    return f"{ID_PREFIX}{network_digest(network)} {network}/{container_id}"[:COMMENT_MAX]


# -- dispatch keys ---------------------------------------------------------------------------
# A key is a short token kept in rule comments ("any/4/tcp/8080", "ip/192.0.2.1/udp/53",
# "masq/10.0.0.2"), from which the map and the element's JSON key are derived.


def dnat_key(m: PortMapping, family: int) -> str:
    if m.host_ip and not m.host_ip_is_any:
        return f"ip/{m.host_ip}/{m.protocol}/{m.host_port}"
    return f"any/{family}/{m.protocol}/{m.host_port}"


def masq_key(container_ip: str) -> str:
    return f"masq/{container_ip}"


def is_key(comment: str) -> bool:
    return comment.startswith(("any/", "ip/", "masq/"))


def key_map(key: str) -> tuple[str, object]:
    """(map name, element key as libnftables JSON) for a key token: exactly the form
    ``nft -j list`` prints, so :func:`key_from_element` reads it back to the same token."""
    kind, rest = key.split("/", 1)
    if kind == "any":
        fam, proto, port = rest.split("/")
        return "dnat_any", {"concat": [f"ipv{fam}", proto, int(port)]}
    if kind == "ip":
        addr, proto, port = rest.rsplit("/", 2)
        return ("dnat_ip6" if ":" in addr else "dnat_ip4"), {"concat": [addr, proto, int(port)]}
    if kind == "masq":
        return ("masq6" if ":" in rest else "masq4"), rest
    raise ValueError(f"not a dispatch key: {key}")


def key_from_element(map_name: str, key: object) -> Optional[str]:
    """The key token of an element as libnftables lists it in JSON (the inverse of key_map)."""
    if map_name in ("masq4", "masq6"):
        return f"masq/{key}" if isinstance(key, str) else None
    if not isinstance(key, dict) or not isinstance(key.get("concat"), list) or len(key["concat"]) != 3:
        return None
    first, proto, port = key["concat"]
    if map_name == "dnat_any":
        fam = {"ipv4": "4", "ipv6": "6"}.get(str(first))
        return f"any/{fam}/{proto}/{port}" if fam else None
    return f"ip/{first}/{proto}/{port}"


def key_port(key: str) -> Optional[tuple[int, str, int]]:
    """(family, protocol, host port) a DNAT key serves; None for a masquerade key."""
    kind, _, rest = key.partition("/")
    if kind == "any":
        fam, proto, port = rest.split("/")
        return int(fam), proto, int(port)
    if kind == "ip":
        addr, proto, port = rest.rsplit("/", 2)
        return (6 if ":" in addr else 4), proto, int(port)
    return None


def keys_of_rules(comments: Iterable[str]) -> tuple[list[str], list[str]]:
    dnat, masq = [], []
    for c in comments:
        if c.startswith("masq/"):
            masq.append(c)
        elif is_key(c) and c not in dnat:
            dnat.append(c)
    return dnat, masq


# -- the map layout's elements -----------------------------------------------------------------


def own_element(key: str) -> tuple[str, object]:
    """(ownership map, element key) of a dispatch key: the verdict map's key, in its own map."""
    vmap, elem_key = key_map(key)
    return OWN_MAPS[vmap], elem_key


def to_element(key: str) -> tuple[str, object]:
    """(DNAT target map, element key) of a DNAT dispatch key."""
    kind, rest = key.split("/", 1)
    if kind == "any":
        fam, proto, port = rest.split("/")
        return TO_MAPS[("any", int(fam))][0], {"concat": [proto, int(port)]}
    if kind == "ip":
        addr, proto, port = rest.rsplit("/", 2)
        return TO_MAPS[("ip", 6 if ":" in addr else 4)][0], {"concat": [addr, proto, int(port)]}
    raise ValueError(f"not a DNAT key: {key}")


def key_from_to(map_name: str, key: object) -> Optional[str]:
    """The dispatch key of a DNAT target map's element (the inverse of :func:`to_element`)."""
    for (kind, family), (name, _keys, _values) in TO_MAPS.items():
        if name != map_name:
            continue
        parts = key.get("concat") if isinstance(key, dict) else None
        if kind == "any" and isinstance(parts, list) and len(parts) == 2:
            return f"any/{family}/{parts[0]}/{parts[1]}"
        if kind == "ip" and isinstance(parts, list) and len(parts) == 3:
            return f"ip/{parts[0]}/{parts[1]}/{parts[2]}"
    return None


def key_from_own(map_name: str, elem_key: object) -> Optional[str]:
    """The dispatch key of an ownership map's element (the inverse of :func:`own_element`)."""
    for vmap, own in OWN_MAPS.items():
        if own == map_name:
            return key_from_element(vmap, elem_key)
    return None


def masq_elements(container_ip: str, masq_all: bool) -> list[tuple[str, object]]:
    """(set, element) pairs that masquerade DNATed traffic to one pod address: every connection
    with ``masqAll``; otherwise the pod's own (hairpin) and, for IPv4, localhost's."""
    family = 6 if ":" in container_ip else 4
    if masq_all:
        return [(MASQ_ALL[family], container_ip)]
    out: list[tuple[str, object]] = [(HAIRPIN[family], {"concat": [container_ip, container_ip]})]
    if family == 4:
        out.append((HAIRPIN[4], {"concat": [container_ip, LOCALHOST4]}))
    return out
