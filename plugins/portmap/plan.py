"""What portmap programs, as pure planning (no kernel access here): one container's plan, the
shared skeleton, and the chain layout's fast-path transactions, as lists of libnftables JSON
commands (:mod:`.commands`).

One ``inet`` table holds everything (shown in nft's text syntax for brevity)::

    prerouting/output (nat, dstnat)  fib daddr type local jump hostports
    hostports     dnat ip to ip daddr . meta l4proto . th dport map @to_ip4     (hostIP mappings)
                  dnat ip6 to ip6 daddr . meta l4proto . th dport map @to_ip6
                  ip daddr . meta l4proto . th dport vmap @dnat_ip4              (the chain layout)
                  ip6 daddr . meta l4proto . th dport vmap @dnat_ip6
                  meta nfproto ipv4 dnat ip to meta l4proto . th dport map @to_any4
                  meta nfproto ipv6 dnat ip6 to meta l4proto . th dport map @to_any6
                  meta nfproto . meta l4proto . th dport vmap @dnat_any
    postrouting (nat, srcnat - 5)    ct status dnat ip[6] daddr vmap @masq4 / @masq6
                                     ct status dnat ip[6] daddr . ip[6] saddr @hairpin4/6 masquerade
                                     ct status dnat ip[6] daddr @masqall4/6 masquerade
    c-<owner>     the chain layout: a container's DNAT rules, each rule's comment the key it serves
    m-<owner>     the chain layout: its hairpin / localhost masquerade rules
    b-<key>       only while several containers of the chain layout claim a key: jumps to each

The map layout (:mod:`.maps`) keeps a container in elements of the maps and sets; the chain layout
(a config with conditions, a key claimed after another container, the previous release's pods) in
its own chains.  Packets cost one map lookup whatever the number of pods.  ``fib daddr type
local`` keeps traffic to addresses that are not the node's own untouched (the reference's PR
#1210 bug).

Each transaction is one command list, applied atomically by :func:`cnichain.common.nft.apply`.
The chain layout's objects are those the earlier text scripts created (same names, types,
priorities, rule expressions and comments), so a node upgraded mid-flight keeps working on its
existing rules.

The chain layout's DEL needs no listing either when the runtime resends the mappings and
prevResult of ADD (libcni does): :func:`config_delete` removes the container's keys and chains in
one transaction that first (re)asserts exactly what ADD installed -- ``add`` of each chain and each
element pointing at it, both no-ops when present -- and then deletes it.  The kernel is the
guard: ``add`` of an element that points at another container's chain fails (EEXIST), deleting
a chain some element not in the config still points at fails (EBUSY), and a failed transaction
changes nothing, after which DEL lists the table.  A repeated DEL simply succeeds.
"""

from __future__ import annotations

from cnichain.common.record import Record

from . import commands as nft
from .names import (
    CHAIN_LAYOUT,
    DSTNAT_PRIORITY,
    HAIRPIN,
    MAPS,
    MASQ_ALL,
    OWN_MAPS,
    OWNER_TYPE,
    OWNERS,
    SETS,
    SRCNAT_PRIORITY,
    TABLE_COMMENT,
    TO_MAPS,
    as_addr,
    dnat_chain,
    dnat_key,
    identity_comment,
    key_map,
    masq_chain,
    masq_key,
    owner_id,
    plan_digest,
)

TYPE_CHECKING = False
if TYPE_CHECKING:  # annotations only: typing costs milliseconds per exec
    from typing import Optional

    from .config import PortmapConfig

# -- the per-container plan ------------------------------------------------------------------


class OwnerPlan(Record):
    """What one container needs: its chains' rules and the keys dispatching to them.

    A rule is the body of a libnftables JSON ``rule`` object without its location:
    ``{"expr": [...]}``, plus ``"comment"`` when it has one (a DNAT rule's dispatch key).
    """

    owner: str
    identity: str
    dnat_rules: list[dict]  # rule bodies for c-<owner>
    masq_rules: list[dict]  # rule bodies for m-<owner>
    dnat_keys: list[str]
    masq_keys: list[str]
    targets: dict[str, tuple[str, int]]  # DNAT key -> (pod address, port): its first mapping's
    masq_all: bool
    conditioned: bool  # the config's conditions apply to a mapped family: chain layout only

    def __init__(
        self,
        owner: str,
        identity: str,
        dnat_rules: Optional[list[dict]] = None,
        masq_rules: Optional[list[dict]] = None,
        dnat_keys: Optional[list[str]] = None,
        masq_keys: Optional[list[str]] = None,
        targets: Optional[dict[str, tuple[str, int]]] = None,
        masq_all: bool = False,
        conditioned: bool = False,
    ) -> None:
        self.owner = owner
        self.identity = identity
        self.dnat_rules = [] if dnat_rules is None else dnat_rules
        self.masq_rules = [] if masq_rules is None else masq_rules
        self.dnat_keys = [] if dnat_keys is None else dnat_keys
        self.masq_keys = [] if masq_keys is None else masq_keys
        self.targets = {} if targets is None else targets
        self.masq_all = masq_all
        self.conditioned = conditioned

    @property
    def empty(self) -> bool:
        return not self.dnat_keys

    @property
    def keys(self) -> list[str]:
        return self.dnat_keys + self.masq_keys

    @property
    def digest(self) -> str:
        """What this plan installs in the map layout, as the 128-bit digest OWNERS holds for it:
        a DEL or a re-ADD with other mappings, addresses or masquerading differs from it."""
        entries = [f"{k}={addr}/{port}" for k, (addr, port) in self.targets.items()]
        entries += [f"{k}{'/all' if self.masq_all else ''}" for k in self.masq_keys]
        return plan_digest(entries)


def _addr_match(family: int, field_: str, addr: str) -> dict:
    return nft.match(nft.payload("ip" if family == 4 else "ip6", field_), addr)


def _marker(comment: str) -> dict:
    """A ``continue`` rule that only carries a comment: the identity, or a masquerade key for DEL."""
    return {"expr": [nft.CONTINUE], "comment": comment}


def plan_owner(
    network: str, container_id: str, cfg: PortmapConfig, ips: dict[int, str]
) -> OwnerPlan:
    """The rules for one container: per family with a container IP, every mapping of that family."""
    plan = OwnerPlan(owner_id(network, container_id), identity_comment(network, container_id),
                     masq_all=cfg.masq_all)
    plan.dnat_rules.append(_marker(plan.identity))
    for family in (4, 6):
        cip = ips.get(family)
        if not cip:
            continue
        cond = cfg.conditions(family)
        mapped = False
        for m in cfg.mappings:
            if not m.applies_to(family):
                continue
            key = dnat_key(m, family)
            plan.targets.setdefault(key, (cip, m.container_port))
            plan.conditioned = plan.conditioned or bool(cond)
            if key.startswith("ip/"):
                match = _addr_match(family, "daddr", m.host_ip)
            else:
                match = nft.match(nft.meta("nfproto"), f"ipv{family}")
            expr = cond + [
                match,
                nft.match(nft.payload(m.protocol, "dport"), m.host_port),
                nft.dnat(family, cip, m.container_port),
            ]
            plan.dnat_rules.append({"expr": expr, "comment": key})
            if key not in plan.dnat_keys:
                plan.dnat_keys.append(key)
            mapped = True
        if mapped and cfg.snat:
            key = masq_key(cip)
            plan.masq_keys.append(key)
            plan.dnat_rules.append(_marker(key))  # index entry for DEL
            dst = _addr_match(family, "daddr", cip)
            if cfg.masq_all:
                plan.masq_rules.append({"expr": [dst, nft.MASQUERADE]})
            else:
                plan.masq_rules.append({"expr": [dst, _addr_match(family, "saddr", cip), nft.MASQUERADE]})
                if family == 4:
                    plan.masq_rules.append({"expr": [dst, _addr_match(4, "saddr", "127.0.0.1"), nft.MASQUERADE]})
    return plan


def rule_comments(rules: list[dict]) -> list[str]:
    """The comments of planned rules, as listing the chain would return them."""
    return [str(r.get("comment", "")) for r in rules]


# -- transactions ----------------------------------------------------------------------------


def declarations() -> str:
    """The table and the DNAT target maps, as an nft script of idempotent ``add`` commands: the
    maps whose values are ``address . port`` can only be declared from text (see
    :func:`.commands.concat_map_text`).  Applied, as its own transaction, before :func:`skeleton`."""
    lines = [nft.table_text()]
    lines += [nft.concat_map_text(name, keys, values) for name, keys, values in TO_MAPS.values()]
    return "\n".join(lines)


def _to_rule(kind: str, family: int) -> dict:
    """``hostports``: DNAT through the family's target map, by destination address when the
    mappings name one (``ip``), by protocol and port alone otherwise (``any``)."""
    name = TO_MAPS[(kind, family)][0]
    l4proto, dport = nft.meta("l4proto"), nft.payload("th", "dport")
    if kind == "ip":
        return nft.rule("hostports", [nft.dnat_map(family, [nft.payload(_ip(family), "daddr"), l4proto, dport], name)])
    return nft.rule("hostports", [nft.match(nft.meta("nfproto"), f"ipv{family}"),
                                  nft.dnat_map(family, [l4proto, dport], name)])


def _ip(family: int) -> str:
    return "ip" if family == 4 else "ip6"


def skeleton() -> list[dict]:
    """The shared table, maps, sets and base chains, rebuilt idempotently by every slow-path
    change (after :func:`declarations`).  ``hostports`` tries a destination address's mappings
    before the any-address ones, and within each the map layout before the chain layout: a
    key's line starts with its owner in the maps (see :mod:`.maps`)."""
    out = [nft.table(TABLE_COMMENT)]
    out += [nft.verdict_map(name, types) for name, types in MAPS.items()]
    out += [nft.data_map(OWN_MAPS[name], types, OWNER_TYPE) for name, types in MAPS.items()]
    out.append(nft.data_map(OWNERS, [OWNER_TYPE], OWNER_TYPE))
    out += [nft.named_set(name, types) for name, types in SETS.items()]
    out += [
        nft.base_chain("prerouting", "prerouting", DSTNAT_PRIORITY),
        nft.base_chain("output", "output", DSTNAT_PRIORITY),
        nft.base_chain("postrouting", "postrouting", SRCNAT_PRIORITY),
        nft.chain("hostports"),
    ]
    out += [nft.flush_chain(c) for c in ("prerouting", "output", "hostports", "postrouting")]
    l4proto, dport = nft.meta("l4proto"), nft.payload("th", "dport")
    dnat_status = nft.ct_status_dnat()
    out += [
        nft.rule("prerouting", [nft.fib_daddr_local(), nft.jump("hostports")]),
        nft.rule("output", [nft.fib_daddr_local(), nft.jump("hostports")]),
        _to_rule("ip", 4),
        _to_rule("ip", 6),
        nft.rule("hostports", [nft.vmap([nft.payload("ip", "daddr"), l4proto, dport], "dnat_ip4")]),
        nft.rule("hostports", [nft.vmap([nft.payload("ip6", "daddr"), l4proto, dport], "dnat_ip6")]),
        _to_rule("any", 4),
        _to_rule("any", 6),
        nft.rule("hostports", [nft.vmap([nft.meta("nfproto"), l4proto, dport], "dnat_any")]),
        nft.rule("postrouting", [dnat_status, nft.vmap([nft.payload("ip", "daddr")], "masq4")]),
        nft.rule("postrouting", [dnat_status, nft.vmap([nft.payload("ip6", "daddr")], "masq6")]),
    ]
    for family in (4, 6):
        daddr, saddr = nft.payload(_ip(family), "daddr"), nft.payload(_ip(family), "saddr")
        out.append(nft.rule("postrouting", [dnat_status, nft.in_set([daddr, saddr], HAIRPIN[family]), nft.MASQUERADE]))
        out.append(nft.rule("postrouting", [dnat_status, nft.in_set([daddr], MASQ_ALL[family]), nft.MASQUERADE]))
    return out


# Rules each shared chain holds once the skeleton is in place (CHECK compares counts).
SKELETON_RULES = {"prerouting": 1, "output": 1, "hostports": 7, "postrouting": 6}


def owner_chains(plan: OwnerPlan, create: bool) -> list[dict]:
    """The container's chains (``create``: EEXIST when present) and their rules."""
    verb = "create" if create else "add"
    c, m = dnat_chain(plan.owner), masq_chain(plan.owner)
    out = [nft.chain(c, verb, plan.identity)]
    out += [nft.rule(c, **r) for r in plan.dnat_rules]
    if plan.masq_rules:
        out.append(nft.chain(m, verb, plan.identity))
        out += [nft.rule(m, **r) for r in plan.masq_rules]
    return out


def element(key: str, target: str = "", verb: str = "add") -> dict:
    """The map element of dispatch ``key``: ``add``/``create`` jumping to ``target``, or ``delete``."""
    name, elem_key = key_map(key)
    return nft.element(name, elem_key, target, verb)


def fast_add(plan: OwnerPlan) -> list[dict]:
    """ADD assuming the table exists, this container is new and its keys are free.

    Only this container's chains and elements: re-declaring chains that already exist (the base
    chains, even the regular ``hostports``) costs the kernel ~12-15 ms per transaction here,
    measured at process exit, which is most of a portmap ADD.  The shared skeleton is created,
    atomically with the table, by :func:`rebuild` on the slow path: on a node without the table
    this transaction fails (ENOENT: no maps yet) and the caller takes that path.  Otherwise it
    fails with EEXIST when the container or one of its keys exists, with the same outcome.
    """
    out = [nft.items(OWNERS, [chain_layout_entry(plan)], "create")]
    out += owner_chains(plan, create=True)
    out += [element(k, dnat_chain(plan.owner), "create") for k in plan.dnat_keys]
    out += [element(k, masq_chain(plan.owner), "create") for k in plan.masq_keys]
    return out


def chain_layout_entry(plan: OwnerPlan) -> list:
    """The OWNERS element of a container in the chain layout: its identity, the layout's digest."""
    return [nft.commented(as_addr(plan.owner), plan.identity), as_addr(CHAIN_LAYOUT)]


def config_delete(plan: OwnerPlan) -> list[dict]:
    """DEL from the config alone, without listing: succeeds only if ``plan``'s keys are exactly
    the container's (see the module docstring); otherwise the kernel voids it and nothing changed."""
    c, m = dnat_chain(plan.owner), masq_chain(plan.owner)
    # Its OWNERS element says the chain layout (refused for a container in the map layout, whose
    # chains this transaction would otherwise find absent and "remove" without touching its maps);
    # a pod of the previous release has none, and the add and delete leave none.
    out = [nft.items(OWNERS, [chain_layout_entry(plan)]), nft.items(OWNERS, [as_addr(plan.owner)], "delete")]
    out += [nft.chain(c), nft.chain(m)]  # the masquerade chain whatever snat says now
    out += [element(k, c) for k in plan.dnat_keys] + [element(k, m) for k in plan.masq_keys]
    out += [element(k, verb="delete") for k in plan.dnat_keys + plan.masq_keys]
    out += [nft.flush_chain(c), nft.delete_chain(c), nft.flush_chain(m), nft.delete_chain(m)]
    return out
