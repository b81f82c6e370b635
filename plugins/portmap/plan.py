"""What portmap programs, as pure text planning (no kernel access here): one container's plan
and the fast-path transactions built from it.

One ``inet`` table holds everything::

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

from .names import (
    DSTNAT_PRIORITY,
    MAPS,
    SRCNAT_PRIORITY,
    TABLE_COMMENT,
    T,
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
    """What one container needs: its chains' rules and the keys dispatching to them."""

    __slots__ = _fields = ("owner", "identity", "dnat_rules", "masq_rules", "dnat_keys", "masq_keys")
    owner: str
    identity: str
    dnat_rules: list[str]  # rule bodies for c-<owner>
    masq_rules: list[str]  # rule bodies for m-<owner>
    dnat_keys: list[str]
    masq_keys: list[str]

    def __init__(
        self,
        owner: str,
        identity: str,
        dnat_rules: Optional[list[str]] = None,
        masq_rules: Optional[list[str]] = None,
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


def _addr_match(family: int, field_: str, addr: str) -> str:
    return f"{'ip' if family == 4 else 'ip6'} {field_} {addr}"


def plan_owner(
    network: str, container_id: str, cfg: PortmapConfig, ips: dict[int, str]
) -> OwnerPlan:
    """The rules for one container: per family with a container IP, every mapping of that family."""
    plan = OwnerPlan(owner_id(network, container_id), identity_comment(network, container_id))
    plan.dnat_rules.append(f'continue comment "{plan.identity}"')
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
                match = f"meta nfproto ipv{family}"
            target = f"{cip}:{m.container_port}" if family == 4 else f"[{cip}]:{m.container_port}"
            nat = "ip" if family == 4 else "ip6"
            body = f"{match} {m.protocol} dport {m.host_port}"
            if cond:
                body = f"{cond} {body}"
            plan.dnat_rules.append(f'{body} dnat {nat} to {target} comment "{key}"')
            if key not in plan.dnat_keys:
                plan.dnat_keys.append(key)
            mapped = True
        if mapped and cfg.snat:
            key = masq_key(cip)
            plan.masq_keys.append(key)
            plan.dnat_rules.append(f'continue comment "{key}"')  # index entry for DEL
            dst = _addr_match(family, "daddr", cip)
            if cfg.masq_all:
                plan.masq_rules.append(f"{dst} masquerade")
            else:
                plan.masq_rules.append(f"{dst} {_addr_match(family, 'saddr', cip)} masquerade")
                if family == 4:
                    plan.masq_rules.append(f"{dst} ip saddr 127.0.0.1 masquerade")
    return plan


# -- transactions ----------------------------------------------------------------------------


def skeleton() -> list[str]:
    """The shared table, maps and base chains, rebuilt idempotently by every slow-path change."""
    out = [f'add table {T} {{ comment "{TABLE_COMMENT}"; }}']
    out += [f"add map {T} {name} {{ type {typ}; }}" for name, typ in MAPS.items()]
    out += [
        f"add chain {T} prerouting {{ type nat hook prerouting priority {DSTNAT_PRIORITY}; policy accept; }}",
        f"add chain {T} output {{ type nat hook output priority {DSTNAT_PRIORITY}; policy accept; }}",
        f"add chain {T} postrouting {{ type nat hook postrouting priority {SRCNAT_PRIORITY}; policy accept; }}",
        f"add chain {T} hostports",
    ]
    out += [f"flush chain {T} {c}" for c in ("prerouting", "output", "hostports", "postrouting")]
    out += [
        f"add rule {T} prerouting fib daddr type local jump hostports",
        f"add rule {T} output fib daddr type local jump hostports",
        f"add rule {T} hostports ip daddr . meta l4proto . th dport vmap @dnat_ip4",
        f"add rule {T} hostports ip6 daddr . meta l4proto . th dport vmap @dnat_ip6",
        f"add rule {T} hostports meta nfproto . meta l4proto . th dport vmap @dnat_any",
        f"add rule {T} postrouting ct status dnat ip daddr vmap @masq4",
        f"add rule {T} postrouting ct status dnat ip6 daddr vmap @masq6",
    ]
    return out


# Rules each shared chain holds once the skeleton is in place (CHECK compares counts).
SKELETON_RULES = {"prerouting": 1, "output": 1, "hostports": 3, "postrouting": 2}


def owner_chains(plan: OwnerPlan, create: bool) -> list[str]:
    verb = "create" if create else "add"
    c, m = dnat_chain(plan.owner), masq_chain(plan.owner)
    out = [f'{verb} chain {T} {c} {{ comment "{plan.identity}"; }}']
    out += [f"add rule {T} {c} {r}" for r in plan.dnat_rules]
    if plan.masq_rules:
        out.append(f'{verb} chain {T} {m} {{ comment "{plan.identity}"; }}')
        out += [f"add rule {T} {m} {r}" for r in plan.masq_rules]
    return out


def element(key: str, target: str, verb: str = "add") -> str:
    name, text = key_map(key)
    if verb == "delete":
        return f"delete element {T} {name} {{ {text} }}"
    return f"{verb} element {T} {name} {{ {text} : jump {target} }}"


def fast_add(plan: OwnerPlan) -> str:
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
    return "\n".join(out) + "\n"


def config_delete(plan: OwnerPlan) -> str:
    """DEL from the config alone, without listing: succeeds only if ``plan``'s keys are exactly
    the container's (see the module docstring); otherwise the kernel voids it and nothing changed."""
    c, m = dnat_chain(plan.owner), masq_chain(plan.owner)
    out = [f"add chain {T} {c}", f"add chain {T} {m}"]  # the masquerade chain whatever snat says now
    out += [element(k, c) for k in plan.dnat_keys] + [element(k, m) for k in plan.masq_keys]
    out += [element(k, "", "delete") for k in plan.dnat_keys + plan.masq_keys]
    out += [f"flush chain {T} {c}", f"delete chain {T} {c}", f"flush chain {T} {m}", f"delete chain {T} {m}"]
    return "\n".join(out) + "\n"


def fast_delete(owner: str, comments: list[str]) -> str:
    """DEL assuming every key of this container dispatches straight to it.

    If a key is shared (its element jumps to a ``b-`` chain that still jumps here), deleting
    the chain fails with EBUSY and the whole transaction is void: the caller takes the slow path.
    """
    dnat, masq = keys_of_rules(comments)
    out = [element(k, "", "delete") for k in dnat + masq]
    out += [f"flush chain {T} {dnat_chain(owner)}", f"delete chain {T} {dnat_chain(owner)}"]
    if masq:
        out += [f"flush chain {T} {masq_chain(owner)}", f"delete chain {T} {masq_chain(owner)}"]
    return "\n".join(out) + "\n"
