"""What portmap programs, as pure planning (no kernel access here): one container's plan and the
fast-path transactions built from it, as lists of libnftables JSON commands (:mod:`.commands`).

One ``inet`` table holds everything (shown in nft's text syntax for brevity)::

    prerouting/output (nat, dstnat)  fib daddr type local jump hostports
    hostports     ip daddr . l4proto . dport vmap @dnat_ip4     (hostIP mappings first)
                  ip6 daddr . l4proto . dport vmap @dnat_ip6
                  nfproto . l4proto . dport vmap @dnat_any      (hostIP unset / 0.0.0.0 / ::)
    postrouting (nat, srcnat - 5)    ct status dnat ip[6] daddr vmap @masq4 / @masq6
    c-<owner>     this container's DNAT rules; each rule's comment is the dispatch key it serves
    m-<owner>     this container's hairpin / localhost masquerade rules
    b-<key>       only while two containers claim the same key: jumps to each, oldest first

Every dispatch key (family/hostIP, protocol, port; or a container IP for masquerading) is one
map element.  Normally the element jumps straight to the owner's chain; a ``b-`` chain exists
only while a key is shared, e.g. a pod sandbox recreated before the old one's DEL.  Packets cost
one map lookup whatever the number of pods, and ADD and DEL touch only the owner's chains and
elements, never listing other pods' rules.  ``fib daddr type local`` keeps traffic to addresses
that are not the node's own untouched (the reference's PR #1210 bug).

Each transaction is one command list, applied atomically by :func:`cnichain.common.nft.apply`.
The objects are those the earlier text scripts created (same names, types, priorities, rule
expressions and comments), so a node upgraded mid-flight keeps working on its existing rules.

DEL normally needs no listing at all.  When the runtime resends the mappings and prevResult of
ADD (libcni does), :func:`config_delete` removes the container's keys and chains in one
transaction that first (re)asserts exactly what ADD installed -- ``add`` of each chain and each
element pointing at it, both no-ops when present -- and then deletes it.  The kernel is the
guard: ``add`` of an element that points at another container's chain fails (EEXIST), deleting
a chain some element not in the config still points at fails (EBUSY), and a failed transaction
changes nothing, after which DEL lists the chain as before.  A repeated DEL simply succeeds.
Listing costs libnftables a cache fill that grows with the number of pods (~4 ms at 1,000).
"""

from __future__ import annotations

from cnichain.common.record import Record

from . import commands as nft
from .names import (
    DSTNAT_PRIORITY,
    MAPS,
    SRCNAT_PRIORITY,
    TABLE_COMMENT,
    dnat_chain,
    dnat_key,
    identity_comment,
    key_map,
    keys_of_rules,
    masq_chain,
    masq_key,
    owner_id,
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

    def __init__(
        self,
        owner: str,
        identity: str,
        dnat_rules: Optional[list[dict]] = None,
        masq_rules: Optional[list[dict]] = None,
        dnat_keys: Optional[list[str]] = None,
        masq_keys: Optional[list[str]] = None,
    ) -> None:
        self.owner = owner
        self.identity = identity
        self.dnat_rules = [] if dnat_rules is None else dnat_rules
        self.masq_rules = [] if masq_rules is None else masq_rules
        self.dnat_keys = [] if dnat_keys is None else dnat_keys
        self.masq_keys = [] if masq_keys is None else masq_keys

    @property
    def empty(self) -> bool:
        return not self.dnat_keys


def _addr_match(family: int, field_: str, addr: str) -> dict:
    return nft.match(nft.payload("ip" if family == 4 else "ip6", field_), addr)


def _marker(comment: str) -> dict:
    """A ``continue`` rule that only carries a comment: the identity, or a masquerade key for DEL."""
    return {"expr": [nft.CONTINUE], "comment": comment}


def plan_owner(
    network: str, container_id: str, cfg: PortmapConfig, ips: dict[int, str]
) -> OwnerPlan:
    """The rules for one container: per family with a container IP, every mapping of that family."""
    plan = OwnerPlan(owner_id(network, container_id), identity_comment(network, container_id))
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


def skeleton() -> list[dict]:
    """The shared table, maps and base chains, rebuilt idempotently by every slow-path change."""
    out = [nft.table(TABLE_COMMENT)]
    out += [nft.verdict_map(name, types) for name, types in MAPS.items()]
    out += [
        nft.base_chain("prerouting", "prerouting", DSTNAT_PRIORITY),
        nft.base_chain("output", "output", DSTNAT_PRIORITY),
        nft.base_chain("postrouting", "postrouting", SRCNAT_PRIORITY),
        nft.chain("hostports"),
    ]
    out += [nft.flush_chain(c) for c in ("prerouting", "output", "hostports", "postrouting")]
    l4proto, dport = nft.meta("l4proto"), nft.payload("th", "dport")
    out += [
        nft.rule("prerouting", [nft.fib_daddr_local(), nft.jump("hostports")]),
        nft.rule("output", [nft.fib_daddr_local(), nft.jump("hostports")]),
        nft.rule("hostports", [nft.vmap([nft.payload("ip", "daddr"), l4proto, dport], "dnat_ip4")]),
        nft.rule("hostports", [nft.vmap([nft.payload("ip6", "daddr"), l4proto, dport], "dnat_ip6")]),
        nft.rule("hostports", [nft.vmap([nft.meta("nfproto"), l4proto, dport], "dnat_any")]),
        nft.rule("postrouting", [nft.ct_status_dnat(), nft.vmap([nft.payload("ip", "daddr")], "masq4")]),
        nft.rule("postrouting", [nft.ct_status_dnat(), nft.vmap([nft.payload("ip6", "daddr")], "masq6")]),
    ]
    return out


# Rules each shared chain holds once the skeleton is in place (CHECK compares counts).
SKELETON_RULES = {"prerouting": 1, "output": 1, "hostports": 3, "postrouting": 2}


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
    out = owner_chains(plan, create=True)
    out += [element(k, dnat_chain(plan.owner), "create") for k in plan.dnat_keys]
    out += [element(k, masq_chain(plan.owner), "create") for k in plan.masq_keys]
    return out


def config_delete(plan: OwnerPlan) -> list[dict]:
    """DEL from the config alone, without listing: succeeds only if ``plan``'s keys are exactly
    the container's (see the module docstring); otherwise the kernel voids it and nothing changed."""
    c, m = dnat_chain(plan.owner), masq_chain(plan.owner)
    out = [nft.chain(c), nft.chain(m)]  # the masquerade chain whatever snat says now
    out += [element(k, c) for k in plan.dnat_keys] + [element(k, m) for k in plan.masq_keys]
    out += [element(k, verb="delete") for k in plan.dnat_keys + plan.masq_keys]
    out += [nft.flush_chain(c), nft.delete_chain(c), nft.flush_chain(m), nft.delete_chain(m)]
    return out


def fast_delete(owner: str, comments: list[str]) -> list[dict]:
    """DEL assuming every key of this container dispatches straight to it.

    If a key is shared (its element jumps to a ``b-`` chain that still jumps here), deleting
    the chain fails with EBUSY and the whole transaction is void: the caller takes the slow path.
    """
    dnat, masq = keys_of_rules(comments)
    out = [element(k, verb="delete") for k in dnat + masq]
    out += [nft.flush_chain(dnat_chain(owner)), nft.delete_chain(dnat_chain(owner))]
    if masq:
        out += [nft.flush_chain(masq_chain(owner)), nft.delete_chain(masq_chain(owner))]
    return out
