"""portmap's verify(): the one reading behind CHECK and the reconciler's intact check, on
snapshots built field by field, so each test names the one thing that differs."""

from __future__ import annotations

from cnichain.plugins.portmap import names, plan as planning, rebuild as slow, verify
from cnichain.plugins.portmap.config import load


def plan(**extra):
    cfg = load({"runtimeConfig": {"portMappings": [{"hostPort": 8080, "containerPort": 80}]}, **extra})
    return planning.plan_owner("pmnet", "a", cfg, {4: "10.1.0.5"})


def installed(p, **changes) -> slow.Snapshot:
    """The snapshot of a table holding the skeleton and ``p`` in the map layout."""
    snap = slow.Snapshot(chains={c: i for i, c in enumerate(planning.SKELETON_RULES)},
                         comments={c: [""] * n for c, n in planning.SKELETON_RULES.items()})
    snap.digests[p.owner], snap.identities[p.owner] = p.digest, p.identity
    for k in p.keys:
        snap.own[k] = p.owner
    snap.to.update(p.targets)
    for k in p.masq_keys:
        for set_name, elem in names.masq_elements(k.split("/", 1)[1], p.masq_all):
            snap.set_elements.setdefault(set_name, set()).add(slow.set_token(elem))
    for field, value in changes.items():
        setattr(snap, field, value)
    return snap


def test_an_intact_container_reads_as_intact():
    p = plan()
    assert verify.problem(installed(p), p) is None


def test_each_missing_or_different_part_is_named():
    p = plan()
    assert "missing hostport rules of" in verify.problem(installed(p, own={}), p)
    assert "lead elsewhere" in verify.problem(installed(p, to={"any/4/tcp/8080": ("10.1.0.6", 80)}), p)
    assert "missing masquerade rules" in verify.problem(installed(p, set_elements={}), p)
    assert "another config" in verify.problem(installed(p, digests={p.owner: plan(masqAll=True).digest}), p)
    assert "another config" in verify.problem(installed(p, digests={}), p)
    shared = installed(p, comments={"prerouting": [], "output": [""], "hostports": [""] * 7, "postrouting": [""] * 6})
    assert verify.problem(shared, p) == f'missing hostport rules in shared chain "prerouting" of table {names.FAMILY_TABLE}'


def test_nothing_held_and_no_table():
    p = plan()
    assert verify.problem(None, p) == f"missing hostport rules: table {names.FAMILY_TABLE} not found"
    empty = installed(p, own={}, to={}, digests={}, identities={}, set_elements={})
    assert verify.problem(empty, p) == f"missing hostport rules: nothing of {p.identity!r} in table {names.FAMILY_TABLE}"


def test_the_chain_layout_is_read_from_its_chains():
    p = plan()
    c, m = names.dnat_chain(p.owner), names.masq_chain(p.owner)
    snap = installed(p, own={}, to={}, set_elements={}, digests={p.owner: names.CHAIN_LAYOUT})
    snap.chains.update({c: 10, m: 11})
    snap.comments.update({c: planning.rule_comments(p.dnat_rules), m: [""] * len(p.masq_rules)})
    snap.elements.update({k: c for k in p.dnat_keys} | {k: m for k in p.masq_keys})
    assert verify.problem(snap, p) is None
    snap.elements.pop(p.dnat_keys[0])
    assert f"missing hostport rules in chain {c!r}" in verify.problem(snap, p)
    # a pod of the previous release: chains, no OWNERS element
    del snap.digests[p.owner]
    snap.elements[p.dnat_keys[0]] = c
    assert verify.problem(snap, p) is None
