"""The nftables layout portmap programs, as pure text planning (no kernel access here).

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

TYPE_CHECKING = False
if TYPE_CHECKING:  # annotations only: typing costs milliseconds per exec
    from typing import Iterable, Optional

    from .config import PortmapConfig, PortMapping

FAMILY = "inet"
TABLE = "cnichain_portmap"
T = f"{FAMILY} {TABLE}"
TABLE_COMMENT = "cnichain portmap: hostPort DNAT and hairpin masquerade"
DSTNAT_PRIORITY = -100
SRCNAT_PRIORITY = 95  # just before srcnat so bridge/ptp masquerade rules cannot pre-empt hairpin
MAPS = {
    "dnat_any": "nf_proto . inet_proto . inet_service : verdict",
    "dnat_ip4": "ipv4_addr . inet_proto . inet_service : verdict",
    "dnat_ip6": "ipv6_addr . inet_proto . inet_service : verdict",
    "masq4": "ipv4_addr : verdict",
    "masq6": "ipv6_addr : verdict",
}
ID_PREFIX = "id "
COMMENT_MAX = 128


# -- names -----------------------------------------------------------------------------------


def _sha256():  # -> a new SHA-256 hash object
    """``hashlib.sha256()`` without importing ``hashlib`` when CPython's own SHA-256 is built in.

    ``import hashlib`` loads OpenSSL's libcrypto through ``_hashlib`` (~2 ms, every ADD and DEL);
    the built-in module it otherwise falls back to imports in ~30 µs and computes the same
    digest.  It is ``_sha2`` since Python 3.12 and ``_sha256`` before; anything else uses hashlib.
    """
    try:
        from _sha2 import sha256  # type: ignore[import-not-found]
    except ImportError:
        try:
            from _sha256 import sha256  # type: ignore[import-not-found,no-redef]
        except ImportError:
            from hashlib import sha256  # type: ignore[no-redef]
    return sha256()


def _digest(*parts: str) -> str:
    h = _sha256()
    for p in parts:
        h.update(p.encode())
        h.update(b"\0")
    return h.hexdigest()


def owner_id(network: str, container_id: str) -> str:
    """The container's identity in chain names: a hash of network name and container ID."""
    return _digest("portmap", network, container_id)[:32]


def network_tag(network: str) -> str:
    return _digest("network", network)[:12]


def dnat_chain(owner: str) -> str:
    return f"c-{owner}"


def masq_chain(owner: str) -> str:
    return f"m-{owner}"


def bucket_chain(key: str) -> str:
    return f"b-{_digest('bucket', key)[:32]}"


def identity_comment(network: str, container_id: str) -> str:
    return f"{ID_PREFIX}{network_tag(network)} {network}/{container_id}"[:COMMENT_MAX]


# -- dispatch keys ---------------------------------------------------------------------------
# A key is a short token kept in rule comments ("any/4/tcp/8080", "ip/192.0.2.1/udp/53",
# "masq/10.0.0.2"), from which the map and element text are derived.


def dnat_key(m: PortMapping, family: int) -> str:
    if m.host_ip and not m.host_ip_is_any:
        return f"ip/{m.host_ip}/{m.protocol}/{m.host_port}"
    return f"any/{family}/{m.protocol}/{m.host_port}"


def masq_key(container_ip: str) -> str:
    return f"masq/{container_ip}"


def is_key(comment: str) -> bool:
    return comment.startswith(("any/", "ip/", "masq/"))


def key_map(key: str) -> tuple[str, str]:
    """(map name, element key text) for a key token."""
    kind, rest = key.split("/", 1)
    if kind == "any":
        fam, proto, port = rest.split("/")
        return "dnat_any", f"ipv{fam} . {proto} . {port}"
    if kind == "ip":
        addr, proto, port = rest.rsplit("/", 2)
        return ("dnat_ip6" if ":" in addr else "dnat_ip4"), f"{addr} . {proto} . {port}"
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


def _fill_owner_chains(plan: OwnerPlan, create: bool) -> list[str]:
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
    out = _fill_owner_chains(plan, create=True)
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


def keys_of_rules(comments: Iterable[str]) -> tuple[list[str], list[str]]:
    dnat, masq = [], []
    for c in comments:
        if c.startswith("masq/"):
            masq.append(c)
        elif is_key(c) and c not in dnat:
            dnat.append(c)
    return dnat, masq


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


# -- the slow path: rebuild the dispatch of the keys involved from a full snapshot -----------


class Snapshot(Record):
    """Our table as listed: chains (handle, rule comments, jump targets) and map elements."""

    __slots__ = _fields = ("chains", "comments", "elements")
    chains: dict[str, int]  # name -> handle
    comments: dict[str, list[str]]  # chain -> rule comments
    elements: dict[str, str]  # key -> jump target

    def __init__(
        self,
        chains: Optional[dict[str, int]] = None,
        comments: Optional[dict[str, list[str]]] = None,
        elements: Optional[dict[str, str]] = None,
    ) -> None:
        self.chains = {} if chains is None else chains
        self.comments = {} if comments is None else comments
        self.elements = {} if elements is None else elements

    @classmethod
    def from_json(cls, objects: list[dict]) -> "Snapshot":
        snap = cls()
        for obj in objects:
            if "chain" in obj:
                ch = obj["chain"]
                snap.chains[ch["name"]] = int(ch.get("handle", 0))
                snap.comments.setdefault(ch["name"], [])
            elif "rule" in obj:
                r = obj["rule"]
                snap.comments.setdefault(r["chain"], []).append(str(r.get("comment", "")))
            elif "map" in obj:
                mp = obj["map"]
                for item in mp.get("elem") or []:
                    if not isinstance(item, list) or len(item) != 2:
                        continue
                    key = key_from_element(mp["name"], item[0])
                    jump = item[1].get("jump") if isinstance(item[1], dict) else None
                    if key and isinstance(jump, dict):
                        snap.elements[key] = str(jump.get("target", ""))
        return snap

    def owners(self) -> list[str]:
        """Owner hashes in creation order (chain handles grow monotonically)."""
        names = [n for n in self.chains if n.startswith("c-")]
        return [n[2:] for n in sorted(names, key=lambda n: self.chains[n])]

    def identity(self, owner: str) -> str:
        for c in self.comments.get(dnat_chain(owner), []):
            if c.startswith(ID_PREFIX):
                return c
        return ""

    def keys(self, owner: str) -> tuple[list[str], list[str]]:
        return keys_of_rules(self.comments.get(dnat_chain(owner), []))


def rebuild(snap: Snapshot, remove: Iterable[str] = (), add: Optional[OwnerPlan] = None) -> str:
    """One transaction that removes owners ``remove``, (re)installs ``add`` and leaves every key
    those owners touch dispatching to exactly the remaining claimants, oldest first."""
    remove = [o for o in remove if dnat_chain(o) in snap.chains and (add is None or o != add.owner)]
    out: list[str] = []
    if add is not None:
        out += skeleton()
    affected: list[str] = []

    def note(keys: Iterable[str]) -> None:
        for k in keys:
            if k not in affected:
                affected.append(k)

    for o in remove:
        note(sum(snap.keys(o), []))
    if add is not None:
        note(sum(snap.keys(add.owner), []))  # a re-ADD may drop keys it had before
        note(add.dnat_keys + add.masq_keys)
        exists = dnat_chain(add.owner) in snap.chains
        if exists:
            out.append(f"flush chain {T} {dnat_chain(add.owner)}")
        if masq_chain(add.owner) in snap.chains:
            out.append(f"flush chain {T} {masq_chain(add.owner)}")
        out += _fill_owner_chains(add, create=False)

    claimants: dict[str, list[str]] = {k: [] for k in affected}
    for o in snap.owners():
        if o in remove or (add is not None and o == add.owner):
            continue
        dnat, masq = snap.keys(o)
        for k in dnat + masq:
            if k in claimants:
                claimants[k].append(o)
    if add is not None:
        pos_known = dnat_chain(add.owner) in snap.chains
        for k in add.dnat_keys + add.masq_keys:
            lst = claimants[k]
            if pos_known:  # keep a re-added container's place in line
                older = [o for o in lst if snap.chains[dnat_chain(o)] < snap.chains[dnat_chain(add.owner)]]
                lst.insert(len(older), add.owner)
            else:
                lst.append(add.owner)

    late: list[str] = []
    for k in affected:
        chain_of = masq_chain if k.startswith("masq/") else dnat_chain
        owners = claimants[k]
        bucket = bucket_chain(k)
        current = snap.elements.get(k)
        if len(owners) >= 2:
            if bucket in snap.chains:
                out.append(f"flush chain {T} {bucket}")
            else:
                out.append(f"add chain {T} {bucket}")
            out += [f'add rule {T} {bucket} jump {chain_of(o)} comment "{o}"' for o in owners]
            target = bucket
        elif owners:
            target = chain_of(owners[0])
            if bucket in snap.chains:
                late += [f"flush chain {T} {bucket}", f"delete chain {T} {bucket}"]
        else:
            target = ""
            if bucket in snap.chains:
                late += [f"flush chain {T} {bucket}", f"delete chain {T} {bucket}"]
        if current != target:
            if current is not None:
                out.append(element(k, "", "delete"))
            if target:
                out.append(element(k, target, "create"))
    for o in remove:
        for ch in (dnat_chain(o), masq_chain(o)):
            if ch in snap.chains:
                late += [f"flush chain {T} {ch}", f"delete chain {T} {ch}"]
    if add is not None and not add.masq_rules and masq_chain(add.owner) in snap.chains:
        late += [f"delete chain {T} {masq_chain(add.owner)}"]
    return "\n".join(out + late) + "\n"


def stale_owners(snap: Snapshot, network: str, valid_container_ids: Iterable[str]) -> list[str]:
    """GC: owners of ``network`` whose container is not among the valid attachments."""
    tag = f"{ID_PREFIX}{network_tag(network)} "
    keep = {owner_id(network, cid) for cid in valid_container_ids}
    return [o for o in snap.owners() if snap.identity(o).startswith(tag) and o not in keep]
