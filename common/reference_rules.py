"""Firewall state the reference plugins (containernetworking/plugins 1.1.1 to 1.9.1) leave for one
container, found the way they tag it, and removed through libnftables JSON.

A node that swaps the reference for cnichain while pods run must be able to tear those pods down
with our DEL, leaving nothing of theirs behind.  The reference tags its objects like this
(``pkg/utils/utils.go``, ``pkg/ip/ipmasq_*_linux.go``, ``plugins/meta/portmap/portmap_*.go``):

* iptables (its default backend; Debian's ``iptables`` is iptables-nft, so the rules live in the
  ``ip nat``/``ip6 nat`` nftables tables): one chain per container, named
  ``CNI-[prefix]<sha512(network + containerID) in hex>`` cut to 28 characters.  portmap uses the
  prefix ``DN-`` (and ``SN-`` for the chain of releases before 0.8), jumped to from
  ``CNI-HOSTPORT-DNAT``; bridge's ipMasq uses no prefix, jumped to from ``POSTROUTING``.  The rules'
  ``-m comment`` texts are xt matches that nftables cannot read back, so the chain name is the
  key: every rule of the table that jumps to the chain goes, then the chain.
* portmap's nftables backend (1.6 on): rules commented with the bare container ID in the
  ``hostports``, ``hostip_hostports`` and ``masquerading`` chains of ``ip``/``ip6 cni_hostport``
  (what the reference's own DEL deletes).
* bridge's nftables ipMasq (1.6 on): rules in ``inet cni_plugins_masquerade`` chain
  ``masq_checks`` whose comment starts with ``<sha512(network)[:16]>-<sha512(ifname:id)[:16]>``.
* bridge's ``macspoofchk``: chains ``cni-br-iface-<id>-<ifname>`` and ``…-mac`` in ``bridge nat``,
  jumped to from its ``PREROUTING`` chain.

Shared chains and tables (``CNI-HOSTPORT-*``, ``cni_hostport``'s base chains) stay, as the
reference leaves them: other containers' rules may still use them.  :func:`plan` is pure;
:func:`remove` lists and applies through :mod:`.nft` (the node's libnftables, no ``iptables``
process and no shell).

Every lookup is of one chain by its name (``list chain F T C``: libnftables fetches that chain
alone, or learns from the table list that it cannot be there), so its cost does not grow with
anyone else's ruleset, ours or kube-proxy's.  No table is listed whole, and ``list tables`` is
never used: libnftables 1.0.6 (Debian 12) fills its whole cache for it -- every rule and set
element of every table -- which made each of our DELs slower the more pods we mapped.  On a node
the reference never ran on, a portmap DEL costs ten such look-ups (~0.05 ms each).
Rules of iptables-legacy (x_tables) are invisible to nftables and out of
reach here; docs/operating.md says so.
"""

from __future__ import annotations

from . import nft
from .kernel_errors import NftError

TYPE_CHECKING = False
if TYPE_CHECKING:  # annotations only
    from typing import Callable, Iterable, Optional

CHAIN_PREFIX = "CNI-"
MAX_CHAIN_LENGTH = 28
PORTMAP_DNAT_PREFIX = "DN-"
PORTMAP_OLD_SNAT_PREFIX = "SN-"
IPTABLES_NAT = (("ip", "nat"), ("ip6", "nat"))
HOSTPORT_TABLES = (("ip", "cni_hostport"), ("ip6", "cni_hostport"))
HOSTPORT_CHAINS = ("hostports", "hostip_hostports", "masquerading")
MASQ_TABLE = ("inet", "cni_plugins_masquerade")
MASQ_CHAIN = "masq_checks"
SPOOF_TABLE = ("bridge", "nat")
SPOOF_CHAIN_PREFIX = "cni-br-iface-"
# The chains the reference jumps to its per-container chains from.
PORTMAP_ENTRY_CHAINS = ("CNI-HOSTPORT-DNAT", "CNI-HOSTPORT-SNAT")
MASQ_ENTRY_CHAINS = ("POSTROUTING",)
SPOOF_ENTRY_CHAINS = ("PREROUTING",)


def _sha512_hex(data: bytes) -> str:
    """SHA-512 in hex through the interpreter's own implementation: ``hashlib`` loads OpenSSL
    (~9 ms per exec here), and every DEL hashes its chain names to look them up."""
    try:
        from _sha512 import sha512  # CPython 3.11 (the builtin module hashlib falls back on)
    except ImportError:  # pragma: no cover - 3.12 renamed it
        from hashlib import sha512
    return sha512(data).hexdigest()


def iptables_chain(network: str, container_id: str, prefix: str = "") -> str:
    """``utils.MustFormatChainNameWithPrefix(network, containerID, prefix)``."""
    return (CHAIN_PREFIX + prefix + _sha512_hex((network + container_id).encode()))[:MAX_CHAIN_LENGTH]


def _hash16(text: str) -> str:
    return _sha512_hex(text.encode())[:16]


def masq_comment_prefix(network: str, ifname: str, container_id: str) -> str:
    """``hashForInstance``: the start of bridge's nftables masquerade rule comments."""
    return f"{_hash16(network)}-{_hash16(ifname + ':' + container_id)}"


class Target:
    """What to remove for one container: per-container chains in iptables-nft tables, and rules
    picked by comment in the reference's own nftables chains.

    ``entries`` are the chains the reference jumps to a per-container chain from
    (``CNI-HOSTPORT-DNAT``, ``POSTROUTING``...), read by name next to the container's chains
    when one of those is there.  The table itself -- kube-proxy's thousands of rules in ``ip nat``
    -- is listed only when a jump from somewhere else made the kernel refuse the deletion (see
    :func:`remove`)."""

    __slots__ = ("chains", "entries", "commented")

    def __init__(
        self,
        chains: Callable[[], list[tuple[str, str, str]]],
        entries: Iterable[str],
        commented: Iterable[tuple[str, str, tuple[str, ...], Callable[[], Callable[[str], bool]]]] = (),
    ) -> None:
        self.chains = chains  # -> [(family, table, chain name)]
        self.entries = tuple(entries)  # the chains that jump to them
        self.commented = tuple(commented)  # (family, table, chains, -> comment predicate)


def portmap_target(network: str, container_id: str) -> Target:
    def chains() -> list[tuple[str, str, str]]:
        names = [iptables_chain(network, container_id, p) for p in (PORTMAP_DNAT_PREFIX, PORTMAP_OLD_SNAT_PREFIX)]
        return [(fam, table, name) for fam, table in IPTABLES_NAT for name in names]

    def is_container(comment: str) -> bool:
        return comment == container_id

    return Target(chains, PORTMAP_ENTRY_CHAINS,
                  [(fam, table, HOSTPORT_CHAINS, lambda: is_container) for fam, table in HOSTPORT_TABLES])


def masquerade_target(network: str, container_id: str, ifname: str) -> Target:
    def chains() -> list[tuple[str, str, str]]:
        name = iptables_chain(network, container_id)
        return [(fam, table, name) for fam, table in IPTABLES_NAT]

    def predicate() -> Callable[[str], bool]:
        prefix = masq_comment_prefix(network, ifname, container_id)
        return lambda comment: comment.startswith(prefix)

    return Target(chains, MASQ_ENTRY_CHAINS, [(MASQ_TABLE[0], MASQ_TABLE[1], (MASQ_CHAIN,), predicate)])


def spoof_check_target(container_id: str, ifname: str) -> Target:
    """bridge's ``macspoofchk``: chains ``cni-br-iface-<id>-<ifname>`` and its ``-mac`` chain in
    ``bridge nat``, jumped to from ``PREROUTING`` (what the reference's own teardown deletes)."""
    iface = f"{SPOOF_CHAIN_PREFIX}{container_id}-{ifname}"
    return Target(lambda: [(*SPOOF_TABLE, iface), (*SPOOF_TABLE, iface + "-mac")], SPOOF_ENTRY_CHAINS)


def _rules(listing: list[dict]) -> list[dict]:
    return [o["rule"] for o in listing if "rule" in o]


def _jumps_to(rule: dict, chain: str) -> bool:
    for expr in rule.get("expr", ()):
        for verdict in ("jump", "goto"):
            v = expr.get(verdict) if isinstance(expr, dict) else None
            if isinstance(v, dict) and v.get("target") == chain:
                return True
    return False


def _delete_rule(rule: dict) -> dict:
    return {"delete": {"rule": {k: rule[k] for k in ("family", "table", "chain", "handle")}}}


def chain_deletions(table_listing: list[dict], family: str, table: str, chains: set[str]) -> list[dict]:
    """Every rule of the listed table that jumps to one of ``chains``, then each such chain that
    exists, flushed and deleted (a chain still referenced cannot be deleted)."""
    present = {o["chain"]["name"] for o in table_listing if "chain" in o} & chains
    if not present:
        return []
    out = [_delete_rule(r) for r in _rules(table_listing)
           if r.get("chain") not in present and any(_jumps_to(r, c) for c in present)]
    for name in sorted(present):
        ref = {"family": family, "table": table, "name": name}
        out += [{"flush": {"chain": dict(ref)}}, {"delete": {"chain": dict(ref)}}]
    return out


def comment_deletions(table_listing: list[dict], chains: tuple[str, ...], match: Callable[[str], bool]) -> list[dict]:
    return [_delete_rule(r) for r in _rules(table_listing)
            if r.get("chain") in chains and isinstance(r.get("comment"), str) and match(r["comment"])]


def _chains(list_cmd: Callable[[str], Optional[list[dict]]], family: str, table: str, names: Iterable[str]) -> list[dict]:
    """The listings of those of the named chains that exist, one after another."""
    out: list[dict] = []
    for name in names:
        out += list_cmd(f"list chain {family} {table} {name}") or ()
    return out


def plan(target: Target, list_cmd: Callable[[str], Optional[list[dict]]], whole_tables: bool = False) -> list[dict]:
    """The deletions for ``target``, reading the kernel only through ``list_cmd`` (an nft
    ``list ...`` command returning its JSON objects, None when the object does not exist).

    Only chains are read, each by its name: the container's own first, and only when one of
    those is there, the entry chains that jump to them (``whole_tables``: the whole table, for a
    jump from elsewhere).  On a node the reference never ran on, every look-up finds nothing.
    """
    out: list[dict] = []
    by_table: dict[tuple[str, str], set[str]] = {}
    for family, table, name in target.chains():
        by_table.setdefault((family, table), set()).add(name)
    for (family, table), names in sorted(by_table.items()):
        mine = _chains(list_cmd, family, table, sorted(names))
        if not mine:
            continue  # none of this container's chains: the usual case, and no more reads
        if whole_tables:
            listing = list_cmd(f"list table {family} {table}") or []
        else:
            listing = _chains(list_cmd, family, table, target.entries) + mine
        out += chain_deletions(listing, family, table, names)
    for family, table, chain_names, predicate in target.commented:
        listing = _chains(list_cmd, family, table, chain_names)
        if listing:
            out += comment_deletions(listing, chain_names, predicate())
    return out


def present(target: Target) -> bool:
    """The reference still holds objects of ``target`` (a pod it set up before a swap in place):
    CHECK then accepts them in place of ours.  Read only."""
    return bool(plan(target, nft.list_ruleset))


def remove(target: Target, what: str) -> list[dict]:
    """Delete what :func:`plan` finds in one transaction.  When the kernel refuses it (the ruleset
    changed in between, or a chain is still jumped to from a chain that is not one of the
    target's entries), the whole tables involved are listed and it is tried once more.  Returns
    the commands applied (empty: nothing was there)."""
    for whole_tables in (False, True):
        commands = plan(target, nft.list_ruleset, whole_tables)
        try:
            nft.apply(commands, what)
            return commands
        except NftError:
            if whole_tables:
                raise
    return []
