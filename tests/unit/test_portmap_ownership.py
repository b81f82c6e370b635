"""Property test of portmap's ownership rule, as a seeded random sequence of ADD and DEL.

The rule: a dispatch key claimed by several live containers always dispatches to its oldest live
owner first (then the others in age order), and a key claimed by one dispatches straight to it.
The nft scripts the planner emits (fast paths and rebuild) are applied to a small model of our
table, taking the fast path exactly when the kernel would accept it, as :mod:`..kernel` does.
"""

from __future__ import annotations

import random
import re

import pytest

from cnichain.plugins.portmap import names, plan as planning, rebuild as slow
from cnichain.plugins.portmap.config import load

NETWORK = "pmnet"
PORTS = (80, 81, 82)
IPS = ("10.1.0.5", "10.1.0.6", "10.1.0.7")


class Table:
    """Just enough of nftables to run the scripts: chains by handle, rule comments, map elements."""

    def __init__(self) -> None:
        self.exists = False
        self.chains: dict[str, int] = {}
        self.comments: dict[str, list[str]] = {}
        self.elements: dict[str, str] = {}
        self.next_handle = 1
        self.by_text: dict[tuple[str, str], str] = {}

    def snapshot(self) -> slow.Snapshot:
        return slow.Snapshot(dict(self.chains), {k: list(v) for k, v in self.comments.items()}, dict(self.elements))

    def know(self, keys) -> None:
        for k in keys:
            self.by_text[names.key_map(k)] = k

    def run(self, script: str) -> None:
        for line in script.splitlines():
            self._line(line.replace(f"{names.T} ", "", 1))

    def _line(self, line: str) -> None:
        words = line.split()
        verb, what = words[0], words[1]
        if what == "table":
            self.exists = True
        elif what == "map":
            pass
        elif what == "chain":
            name = words[2]
            if verb in ("add", "create") and name not in self.chains:
                self.chains[name] = self.next_handle
                self.next_handle += 1
                self.comments[name] = []
            elif verb == "flush":
                self.comments[name] = []
            elif verb == "delete":
                del self.chains[name], self.comments[name]
        elif what == "rule":
            comment = re.search(r'comment "([^"]*)"\s*$', line)
            self.comments[words[2]].append(comment.group(1) if comment else "")
        elif what == "element":
            body = line[line.index("{") + 1: line.rindex("}")].strip()
            text, _, target = body.partition(" : jump ")
            key = self.by_text[(words[2], text.strip())]
            if verb == "delete":
                del self.elements[key]
            else:
                self.elements[key] = target.strip()


def _plan(cid: str, rng: random.Random) -> planning.OwnerPlan:
    mappings = [{"hostPort": p, "containerPort": 8000, "protocol": rng.choice(("tcp", "udp"))}
                for p in rng.sample(PORTS, rng.randint(1, 2))]
    cfg = load({"cniVersion": "1.0.0", "name": NETWORK, "type": "portmap",
                "runtimeConfig": {"portMappings": mappings}})
    return planning.plan_owner(NETWORK, cid, cfg, {4: rng.choice(IPS)})


def _add(table: Table, plan: planning.OwnerPlan) -> None:
    table.know(plan.dnat_keys + plan.masq_keys)
    fast_ok = (table.exists and names.dnat_chain(plan.owner) not in table.chains
               and not any(k in table.elements for k in plan.dnat_keys + plan.masq_keys))
    if fast_ok:
        table.run(planning.fast_add(plan))
    else:
        table.run(slow.rebuild(table.snapshot(), add=plan))


def _delete(table: Table, owner: str) -> None:
    chain = names.dnat_chain(owner)
    if chain not in table.chains:
        return
    comments = table.comments[chain]
    dnat, masq = names.keys_of_rules(comments)
    direct = all(table.elements.get(k) in (chain, names.masq_chain(owner)) for k in dnat + masq)
    if direct:
        table.run(planning.fast_delete(owner, comments))
    else:
        table.run(slow.rebuild(table.snapshot(), remove=[owner]))


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


@pytest.mark.parametrize("seed", range(40))
def test_shared_key_belongs_to_its_oldest_live_owner(seed):
    rng = random.Random(seed)
    table = Table()
    live: list[tuple[str, planning.OwnerPlan]] = []
    for _step in range(30):
        if live and rng.random() < 0.4:
            cid, plan = live.pop(rng.randrange(len(live)))
            _delete(table, plan.owner)
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
