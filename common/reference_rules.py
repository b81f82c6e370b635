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
process and no shell).  Rules of iptables-legacy (x_tables) are invisible to nftables and out of
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


def iptables_chain(network: str, container_id: str, prefix: str = "") -> str:
    """``utils.MustFormatChainNameWithPrefix(network, containerID, prefix)``."""
    import hashlib  # ~9 ms: only once a table of the reference is there (see plan)

    digest = hashlib.sha512((network + container_id).encode()).hexdigest()
    return (CHAIN_PREFIX + prefix + digest)[:MAX_CHAIN_LENGTH]


def _hash16(text: str) -> str:
    import hashlib

    return hashlib.sha512(text.encode()).hexdigest()[:16]


def masq_comment_prefix(network: str, ifname: str, container_id: str) -> str:
    """``hashForInstance``: the start of bridge's nftables masquerade rule comments."""
    return f"{_hash16(network)}-{_hash16(ifname + ':' + container_id)}"


class Target:
    """What to remove for one container: per-container chains in iptables-nft tables, and rules
    picked by comment in the reference's own nftables tables.  Both are computed only when
    :func:`plan` found one of those tables (hashing costs an import on every DEL otherwise)."""

    __slots__ = ("chain_tables", "chains", "commented")

    def __init__(
        self,
        chain_tables: Iterable[tuple[str, str]],
        chains: Callable[[], list[tuple[str, str, str]]],
        commented: Iterable[tuple[str, str, tuple[str, ...], Callable[[], Callable[[str], bool]]]] = (),
    ) -> None:
        self.chain_tables = frozenset(chain_tables)  # where ``chains`` can be
        self.chains = chains  # -> [(family, table, chain name)]
        self.commented = tuple(commented)  # (family, table, chains, -> comment predicate)


def portmap_target(network: str, container_id: str) -> Target:
    def chains() -> list[tuple[str, str, str]]:
        names = [iptables_chain(network, container_id, p) for p in (PORTMAP_DNAT_PREFIX, PORTMAP_OLD_SNAT_PREFIX)]
        return [(fam, table, name) for fam, table in IPTABLES_NAT for name in names]

    def is_container(comment: str) -> bool:
        return comment == container_id

    return Target(IPTABLES_NAT, chains,
                  [(fam, table, HOSTPORT_CHAINS, lambda: is_container) for fam, table in HOSTPORT_TABLES])


def masquerade_target(network: str, container_id: str, ifname: str) -> Target:
    def chains() -> list[tuple[str, str, str]]:
        name = iptables_chain(network, container_id)
        return [(fam, table, name) for fam, table in IPTABLES_NAT]

    def predicate() -> Callable[[str], bool]:
        prefix = masq_comment_prefix(network, ifname, container_id)
        return lambda comment: comment.startswith(prefix)

    return Target(IPTABLES_NAT, chains, [(MASQ_TABLE[0], MASQ_TABLE[1], (MASQ_CHAIN,), predicate)])


def spoof_check_target(container_id: str, ifname: str) -> Target:
    """bridge's ``macspoofchk``: chains ``cni-br-iface-<id>-<ifname>`` and its ``-mac`` chain in
    ``bridge nat``, jumped to from ``PREROUTING`` (what the reference's own teardown deletes)."""
    iface = f"{SPOOF_CHAIN_PREFIX}{container_id}-{ifname}"
    return Target((SPOOF_TABLE,), lambda: [(*SPOOF_TABLE, iface), (*SPOOF_TABLE, iface + "-mac")])


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


def plan(target: Target, list_cmd: Callable[[str], Optional[list[dict]]]) -> list[dict]:
    """The deletions for ``target``, reading the kernel only through ``list_cmd`` (an nft
    ``list ...`` command returning its JSON objects, None when the object does not exist).

    One ``list tables`` first: on a node the reference never ran on, that is all it costs.
    """
    tables = {(o["table"]["family"], o["table"]["name"]) for o in list_cmd("list tables") or () if "table" in o}
    out: list[dict] = []
    by_table: dict[tuple[str, str], set[str]] = {}
    chains = target.chains() if tables & target.chain_tables else []
    for family, table, name in chains:
        if (family, table) in tables:
            by_table.setdefault((family, table), set()).add(name)
    for (family, table), names in sorted(by_table.items()):
        # the chain alone first: the whole nat table can be large (kube-proxy) and is read
        # only when one of this container's chains is really there
        if not any(list_cmd(f"list chain {family} {table} {name}") is not None for name in sorted(names)):
            continue
        out += chain_deletions(list_cmd(f"list table {family} {table}") or [], family, table, names)
    for family, table, chain_names, predicate in target.commented:
        if (family, table) in tables:
            out += comment_deletions(list_cmd(f"list table {family} {table}") or [], chain_names, predicate())
    return out


def present(target: Target) -> bool:
    """The reference still holds objects of ``target`` (a pod it set up before a swap in place):
    CHECK then accepts them in place of ours.  Read only."""
    return bool(plan(target, nft.list_ruleset))


def remove(target: Target, what: str) -> list[dict]:
    """Delete what :func:`plan` finds in one transaction; listed again and retried once when the
    kernel changed in between.  Returns the commands applied (empty: nothing was there)."""
    for attempt in (1, 2):
        commands = plan(target, nft.list_ruleset)
        try:
            nft.apply(commands, what)
            return commands
        except NftError:
            if attempt == 2:
                raise
    return []
