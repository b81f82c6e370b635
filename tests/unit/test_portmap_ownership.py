"""Property test of portmap's ownership rule, as a seeded random sequence of ADD and DEL.

The rule: a dispatch key claimed by several live containers always dispatches to its oldest live
owner first (then the others in age order), and a key claimed by one dispatches straight to it.
The libnftables JSON command lists the planner emits (fast paths and rebuild) are applied to a
small model of our table that refuses what the kernel refuses (EEXIST, ENOENT, EBUSY) and applies
each list all or nothing; ADD and DEL take the fast paths and fall back exactly as
:mod:`..kernel` does, and the test also checks that the model refuses a fast path exactly when
the table's state says the kernel must.
"""

from __future__ import annotations

import copy
import random

import pytest

from cnichain.plugins.portmap import names, plan as planning, rebuild as slow
from cnichain.plugins.portmap.config import load

NETWORK = "pmnet"
PORTS = (80, 81, 82)
IPS = ("10.1.0.5", "10.1.0.6", "10.1.0.7")


class Refused(Exception):
    """The model's nftables refusal: the whole transaction is void."""


class Table:
    """Just enough of nftables to run portmap's JSON transactions: chains by handle, their rules'
    comments and jump targets, map elements by dispatch key."""

    def __init__(self) -> None:
        self.exists = False
        self.maps: set[str] = set()
        self.chains: dict[str, int] = {}
        self.comments: dict[str, list[str]] = {}
        self.jumps: dict[str, list[str]] = {}
        self.elements: dict[str, str] = {}
        self.next_handle = 1

    def snapshot(self) -> slow.Snapshot:
        return slow.Snapshot(dict(self.chains), {k: list(v) for k, v in self.comments.items()}, dict(self.elements))

    def apply(self, commands: list[dict]) -> None:
        """All of ``commands`` or, raising :class:`Refused`, none of them."""
        work = copy.deepcopy(self)
        for command in commands:
            work._command(command)
        self.__dict__.update(work.__dict__)

    def _command(self, command: dict) -> None:
        [(verb, obj)] = command.items()
        [(kind, body)] = obj.items()
        assert body["family"] == names.FAMILY and body.get("table", body.get("name")) == names.TABLE, body
        if kind == "table":
            self.exists = True
            return
        if not self.exists:
            raise Refused("ENOENT: no table")
        getattr(self, f"_{kind}")(verb, body)

    def _map(self, verb: str, body: dict) -> None:
        assert verb == "add"
        self.maps.add(body["name"])

    def _chain(self, verb: str, body: dict) -> None:
        name = body["name"]
        if verb in ("add", "create"):
            if name in self.chains:
                if verb == "create":
                    raise Refused(f"EEXIST: chain {name}")
                return
            self.chains[name] = self.next_handle
            self.next_handle += 1
            self.comments[name], self.jumps[name] = [], []
            return
        if name not in self.chains:
            raise Refused(f"ENOENT: chain {name}")
        if verb == "flush":
            self.comments[name], self.jumps[name] = [], []
        elif verb == "delete":
            used = name in self.elements.values() or any(name in j for j in self.jumps.values())
            if used or self.comments[name]:
                raise Refused(f"EBUSY: chain {name}")
            del self.chains[name], self.comments[name], self.jumps[name]
        else:
            raise AssertionError(verb)

    def _rule(self, verb: str, body: dict) -> None:
        assert verb == "add"
        chain = body["chain"]
        if chain not in self.chains:
            raise Refused(f"ENOENT: chain {chain}")
        targets = [e["jump"]["target"] for e in body["expr"] if "jump" in e]
        if any(t not in self.chains for t in targets):
            raise Refused(f"ENOENT: jump target of {targets}")
        self.comments[chain].append(body.get("comment", ""))
        self.jumps[chain] += targets

    def _element(self, verb: str, body: dict) -> None:
        if body["name"] not in self.maps:
            raise Refused(f"ENOENT: map {body['name']}")
        [item] = body["elem"]
        raw = item if verb == "delete" else item[0]
        key = names.key_from_element(body["name"], raw)
        assert key is not None and names.key_map(key) == (body["name"], raw), item
        if verb == "delete":
            if key not in self.elements:
                raise Refused(f"ENOENT: element {key}")
            del self.elements[key]
            return
        target = item[1]["jump"]["target"]
        if target not in self.chains:
            raise Refused(f"ENOENT: chain {target}")
        if key in self.elements and (verb == "create" or self.elements[key] != target):
            raise Refused(f"EEXIST: element {key}")
        self.elements[key] = target


def _accepted(table: Table, commands: list[dict]) -> bool:
    try:
        table.apply(commands)
    except Refused:
        return False
    return True


def _plan(cid: str, rng: random.Random) -> planning.OwnerPlan:
    mappings = [{"hostPort": p, "containerPort": 8000, "protocol": rng.choice(("tcp", "udp"))}
                for p in rng.sample(PORTS, rng.randint(1, 2))]
    cfg = load({"cniVersion": "1.0.0", "name": NETWORK, "type": "portmap",
                "runtimeConfig": {"portMappings": mappings}})
    return planning.plan_owner(NETWORK, cid, cfg, {4: rng.choice(IPS)})


def _add(table: Table, plan: planning.OwnerPlan) -> None:
    """As kernel.install: the fast ADD, else a rebuild from a listing."""
    fast_ok = (table.exists and names.dnat_chain(plan.owner) not in table.chains
               and not any(k in table.elements for k in plan.dnat_keys + plan.masq_keys))
    assert _accepted(table, planning.fast_add(plan)) == fast_ok
    if not fast_ok:
        table.apply(slow.rebuild(table.snapshot(), add=plan))


def _delete(table: Table, plan: planning.OwnerPlan, with_config: bool) -> None:
    """As kernel.remove: DEL from the config when the runtime resent it, else (or when the
    kernel refused that) from the chain's listing, else a rebuild."""
    owner = plan.owner
    chain = names.dnat_chain(owner)
    comments = table.comments.get(chain)
    direct = comments is not None and all(
        table.elements.get(k) in (chain, names.masq_chain(owner)) for k in sum(names.keys_of_rules(comments), [])
    )
    if with_config:
        # this test's configs always match what ADD installed, so only sharing can refuse it
        if _accepted(table, planning.config_delete(plan)):
            assert direct or comments is None
            return
        assert not direct
    if comments is None:
        return  # never added, or already deleted
    assert _accepted(table, planning.fast_delete(owner, comments)) == direct
    if not direct:
        table.apply(slow.rebuild(table.snapshot(), remove=[owner]))


def _check(table: Table, live: list[tuple[str, planning.OwnerPlan]]) -> None:
    claimed: dict[str, list[str]] = {}
    for _cid, plan in live:  # oldest first
        for k in plan.dnat_keys + plan.masq_keys:
            claimed.setdefault(k, []).append(plan.owner)
    assert set(table.elements) == set(claimed)
    for key, owners in claimed.items():
        chain_of = names.masq_chain if key.startswith("masq/") else names.dnat_chain
        target = table.elements[key]
        if len(owners) == 1:
            assert target == chain_of(owners[0]), key
        else:
            assert target == names.bucket_chain(key), key
            assert table.comments[target] == owners, key  # oldest live owner first
    live_chains = {names.dnat_chain(p.owner) for _c, p in live}
    assert {c for c in table.chains if c.startswith("c-")} == live_chains
    # nothing leaks: every other chain is shared layout, a live owner's masquerade chain or the
    # bucket of a key that is shared right now
    allowed = set(planning.SKELETON_RULES) | {names.masq_chain(p.owner) for _c, p in live if p.masq_rules}
    allowed |= {names.bucket_chain(k) for k, owners in claimed.items() if len(owners) > 1}
    assert set(table.chains) - live_chains <= allowed


@pytest.mark.parametrize("seed", range(40))
def test_shared_key_belongs_to_its_oldest_live_owner(seed):
    rng = random.Random(seed)
    table = Table()
    live: list[tuple[str, planning.OwnerPlan]] = []
    for _step in range(30):
        if live and rng.random() < 0.4:
            cid, plan = live.pop(rng.randrange(len(live)))
            _delete(table, plan, with_config=rng.random() < 0.5)
        else:
            cid = f"ctr{rng.randrange(8)}"
            plan = _plan(cid, rng)
            _add(table, plan)
            known = [i for i, (c, _p) in enumerate(live) if c == cid]
            if known:
                live[known[0]] = (cid, plan)  # a re-ADD keeps its place in line
            else:
                live.append((cid, plan))
        _check(table, live)
