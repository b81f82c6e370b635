"""Property test of portmap's ownership rule, as a seeded random sequence of ADD and DEL.

The rule: each key has one line of live claimants, in the order they claimed it (a re-ADD keeps
the claims it had; a key it newly claims joins the end), and packets go to the first: the key's
owner in the map layout when there is one, then the chain layout's dispatch in line order.  No
DEL removes another container's element.  The libnftables JSON command lists the planner emits
(map-layout claims and releases, chain-layout transactions and rebuilds) are applied to a small
model of our table that refuses what the kernel refuses (EEXIST, ENOENT, EBUSY) and applies each
list all or nothing; ADD and DEL take the fast paths and fall back exactly as :mod:`..kernel`
does.  The model lists itself in the JSON form ``nft -j list`` prints, so the slow path reads it
through the same parser as the kernel's listing, and the test also checks that the model refuses
a fast ADD exactly when the table's state says the kernel must.
"""

from __future__ import annotations

import copy
import json
import random

import pytest

from cnichain.plugins.portmap import maps, names, plan as planning, rebuild as slow
from cnichain.plugins.portmap.config import load

NETWORK = "pmnet"
PORTS = (80, 81, 82)
IPS = ("10.1.0.5", "10.1.0.6", "10.1.0.7")
TO_MAPS = {name for name, _k, _v in names.TO_MAPS.values()}


class Refused(Exception):
    """The model's nftables refusal: the whole transaction is void."""


def _canon(value: object) -> str:
    if isinstance(value, dict) and isinstance(value.get("elem"), dict):
        value = value["elem"]["val"]  # the comment is not part of the key
    return json.dumps(value, sort_keys=True)


class Table:
    """Just enough of nftables to run portmap's JSON transactions: chains by handle, their rules'
    comments and jump targets, maps' and sets' elements by key with the value each was given."""

    def __init__(self) -> None:
        self.exists = False
        self.maps: dict[str, dict[str, tuple[object, object]]] = {}  # name -> canon key -> (key, value)
        self.sets: dict[str, dict[str, object]] = {}
        self.chains: dict[str, int] = {}
        self.comments: dict[str, list[str]] = {}
        self.jumps: dict[str, list[str]] = {}
        self.next_handle = 1

    def declare(self) -> None:
        """:func:`.plan.declarations`: the table and the target maps (nft text, not JSON)."""
        self.exists = True
        for name in TO_MAPS:
            self.maps.setdefault(name, {})

    def listing(self) -> list[dict]:
        out: list[dict] = []
        for name, elems in self.maps.items():
            out.append({"map": {"name": name, "elem": [[k, v] for k, v in elems.values()]}})
        for name, keys in self.sets.items():
            out.append({"set": {"name": name, "elem": list(keys.values())}})
        for name, handle in self.chains.items():
            out.append({"chain": {"name": name, "handle": handle}})
            out += [{"rule": {"chain": name, "comment": c}} for c in self.comments[name]]
        return out

    def snapshot(self) -> slow.Snapshot:
        return slow.Snapshot.from_json(self.listing())

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
        self.maps.setdefault(body["name"], {})

    def _set(self, verb: str, body: dict) -> None:
        assert verb == "add"
        self.sets.setdefault(body["name"], {})

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
            targets = [v.get("jump", {}).get("target") for m in self.maps.values() for _k, v in m.values()
                       if isinstance(v, dict)]
            if name in targets or any(name in j for j in self.jumps.values()) or self.comments[name]:
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
        name = body["name"]
        if name in self.sets:
            for key in body["elem"]:
                self._one(self.sets[name], verb, key, None, is_set=True)
            return
        if name not in self.maps:
            raise Refused(f"ENOENT: map {name}")
        for item in body["elem"]:
            key, value = (item, None) if verb == "delete" else (item[0], item[1])
            if isinstance(value, dict) and "jump" in value and value["jump"]["target"] not in self.chains:
                raise Refused(f"ENOENT: chain {value['jump']['target']}")
            self._one(self.maps[name], verb, key, value)

    @staticmethod
    def _one(store: dict, verb: str, key: object, value: object, is_set: bool = False) -> None:
        canon = _canon(key)
        if verb == "delete":
            if canon not in store:
                raise Refused(f"ENOENT: element {canon}")
            del store[canon]
            return
        if canon in store:
            held = store[canon] if is_set else store[canon][1]
            if verb == "create" or (not is_set and _canon(held) != _canon(value)):
                raise Refused(f"EEXIST: element {canon}")
            return
        store[canon] = key if is_set else (key, value)


def _accepted(table: Table, commands: list[dict]) -> bool:
    try:
        table.apply(commands)
    except Refused:
        return False
    return True


def _plan(cid: str, rng: random.Random) -> planning.OwnerPlan:
    mappings = [{"hostPort": p, "containerPort": 8000, "protocol": rng.choice(("tcp", "udp"))}
                for p in rng.sample(PORTS, rng.randint(1, 2))]
    conf = {"cniVersion": "1.0.0", "name": NETWORK, "type": "portmap", "runtimeConfig": {"portMappings": mappings}}
    if rng.random() < 0.15:
        conf["conditionsV4"] = ["ip saddr 10.0.0.0/8"]  # the chain layout, whatever the keys
    return planning.plan_owner(NETWORK, rng.choice(("", "x")) + cid, load(conf), {4: rng.choice(IPS)})


def _fast_add_ok(table: Table, plan: planning.OwnerPlan) -> bool:
    """Whether the kernel must accept the map layout's claim, from the table's state."""
    snap = table.snapshot()
    if names.OWNERS not in table.maps or snap.digests.get(plan.owner, plan.digest) != plan.digest:
        return False
    return all(snap.own.get(k, plan.owner) == plan.owner and k not in snap.elements for k in plan.keys)


def _add(table: Table, plan: planning.OwnerPlan) -> None:
    """As kernel.install: the fast ADD of the plan's layout, else a rebuild from a listing."""
    if plan.conditioned:
        accepted = _accepted(table, planning.fast_add(plan))
    else:
        expected = _fast_add_ok(table, plan)
        accepted = _accepted(table, maps.claim(plan))
        assert accepted == expected
    if not accepted:
        table.declare()
        table.apply(slow.rebuild(table.snapshot(), add=plan))


def _delete(table: Table, plan: planning.OwnerPlan, with_config: bool) -> None:
    """As kernel.remove: DEL from the config when the runtime resent it (the map layout's
    release, then the chain layout's), else or when both were refused, a rebuild."""
    if with_config:
        fast = [planning.config_delete(plan)] if plan.conditioned else [maps.release(plan), planning.config_delete(plan)]
        for commands in fast:
            if _accepted(table, commands):
                return
    table.apply(slow.rebuild(table.snapshot(), remove=[plan.owner]))


def _check(table: Table, live: dict[str, planning.OwnerPlan], lines: dict[str, list[str]]) -> None:
    snap = table.snapshot()
    owner_of = {cid: p.owner for cid, p in live.items()}
    for key, cids in lines.items():
        expected = [owner_of[c] for c in cids]
        served = ([snap.own[key]] if key in snap.own else []) + snap.line(key)
        assert served == expected, key
    assert set(snap.own) | set(snap.elements) == set(lines)
    assert set(snap.owners()) == set(owner_of.values())
    mapped = [p for p in live.values() if p.owner in snap.map_owners()]
    # the map layout holds exactly its owners' elements
    assert {k: snap.to[k] for k in snap.to} == {k: p.targets[k] for p in mapped for k in p.dnat_keys
                                                 if snap.own.get(k) == p.owner}
    for p in mapped:
        assert snap.digests[p.owner] == p.digest and set(snap.map_keys(p.owner)) <= set(p.keys)
    want_sets: dict[str, set[str]] = {}
    for key, owner in snap.own.items():
        if key.startswith("masq/"):
            p = next(p for p in mapped if p.owner == owner)
            for set_name, elem in names.masq_elements(key.split("/", 1)[1], p.masq_all):
                want_sets.setdefault(set_name, set()).add(slow.set_token(elem))
    assert {s: e for s, e in snap.set_elements.items() if e} == want_sets
    # nothing leaks in the chain layout: a chain-layout owner's chains, a bucket of a shared line
    chained = [p for p in live.values() if snap.digests.get(p.owner) == names.CHAIN_LAYOUT]
    allowed = set(planning.SKELETON_RULES) | {names.dnat_chain(p.owner) for p in chained}
    allowed |= {names.masq_chain(p.owner) for p in chained if p.masq_rules}
    allowed |= {names.bucket_chain(k) for k, owners in snap.chain_claims().items() if len(owners) > 1}
    assert set(table.chains) <= allowed


@pytest.mark.parametrize("seed", range(60))
def test_every_key_serves_its_first_live_claimant(seed):
    rng = random.Random(seed)
    table = Table()
    live: dict[str, planning.OwnerPlan] = {}
    lines: dict[str, list[str]] = {}  # key -> container IDs in claim order
    for _step in range(30):
        if live and rng.random() < 0.4:
            cid = rng.choice(sorted(live))
            plan = live.pop(cid)
            _delete(table, plan, with_config=rng.random() < 0.5)
            for line in lines.values():
                if cid in line:
                    line.remove(cid)
        else:
            cid = f"ctr{rng.randrange(8)}"
            plan = _plan(cid, rng)
            cid = plan.identity.split("/", 1)[1]
            _add(table, plan)
            for key, line in lines.items():
                if cid in line and key not in plan.keys:
                    line.remove(cid)  # a re-ADD that no longer claims it
            for key in plan.keys:
                line = lines.setdefault(key, [])
                if cid not in line:
                    line.append(cid)
            live[cid] = plan
        lines = {k: v for k, v in lines.items() if v}
        _check(table, live, lines)
