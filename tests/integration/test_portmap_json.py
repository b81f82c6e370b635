"""Every command list portmap's planner emits, applied by the real libnftables in a lab namespace.

The unit tests check the JSON's shape; this checks that the kernel's libnftables accepts each
transaction as built (through ``common.nft.apply``, the plugin's own path), refuses each exactly
when the table's state says it must, and that what it installs reads back as planned: in the map
layout every element with its planned value, in the chain layout the DNAT and masquerade rules
with exactly the planned expressions and the verdict-map elements with the planned keys.  The
configs cover conditions for both families, hostIPs of both families, IPv6, UDP, and
snat/masqAll on and off.
"""

from __future__ import annotations

import json
import sys

import pytest

from cnichain.plugins.portmap import maps, names, plan as planning, rebuild as slow
from cnichain.plugins.portmap.config import load

pytestmark = pytest.mark.integration

NET = "pmjson"
_APPLY = (
    "import json, sys\n"
    "from cnichain.common import nft\n"
    "from cnichain.common.kernel_errors import NftError\n"
    "try:\n"
    "    nft.apply(json.load(sys.stdin), 'portmap test')\n"
    "except NftError as exc:\n"
    "    print(exc.errno, exc.text)\n"
    "    sys.exit(1)\n"
)


def declare(lab) -> None:
    """The table and its target maps, as the slow path declares them before a rebuild."""
    lab.run(lab.node, "nft", "-f", "-", input=planning.declarations() + "\n")


def apply(lab, commands: list[dict]) -> str:
    """Apply one transaction in the lab's node namespace; '' when accepted, else libnftables' report."""
    proc = lab.run(lab.node, sys.executable, "-c", _APPLY, check=False, input=json.dumps(commands))
    assert proc.returncode in (0, 1), proc.stderr  # 1: refused, with libnftables' report printed
    assert (proc.returncode == 0) == (proc.stdout.strip() == ""), (proc.returncode, proc.stdout)
    return proc.stdout.strip()


def listing(lab) -> list[dict]:
    proc = lab.run(lab.node, "nft", "-j", "list", "table", names.FAMILY_TABLE, check=False)
    return json.loads(proc.stdout)["nftables"] if proc.returncode == 0 else []


def snapshot(lab) -> slow.Snapshot:
    return slow.Snapshot.from_json(listing(lab))


def listed_rules(lab, chain: str) -> list[dict]:
    return [
        {k: v for k, v in o["rule"].items() if k in ("expr", "comment")}
        for o in listing(lab) if "rule" in o and o["rule"]["chain"] == chain
    ]


CONDITIONS = {
    "conditionsV4": ["ip saddr { 10.0.0.0/8, 192.168.0.0/16 } iifname != veth*", "ip daddr != 192.0.2.77"],
    "conditionsV6": ["ip6", "saddr", "fd00::/8", 'oifname "eth0"'],
}


def plan(cid: str, ip4: str, ip6: str, *, host_port_base: int = 8080, conditions: bool = True,
         **extra) -> planning.OwnerPlan:
    mappings = [
        {"hostPort": host_port_base, "containerPort": 80, "protocol": "tcp"},
        {"hostPort": host_port_base + 2, "containerPort": 5353, "protocol": "udp", "hostIP": "192.0.2.1"},
        {"hostPort": host_port_base + 3, "containerPort": 8443, "protocol": "tcp", "hostIP": "2001:db8::1"},
        {"hostPort": host_port_base + 1, "containerPort": 81, "protocol": "udp", "hostIP": "::"},
    ]
    cfg = load({
        "cniVersion": "1.0.0", "name": NET, "type": "portmap", **(CONDITIONS if conditions else {}),
        "runtimeConfig": {"portMappings": mappings}, **extra,
    })
    return planning.plan_owner(NET, cid, cfg, {4: ip4, 6: ip6})


def held_in_maps(snap: slow.Snapshot, p: planning.OwnerPlan) -> bool:
    """Every element of ``p``'s map layout is in the table with its planned value."""
    masq = all(snap.has_set_element(s, e) for k in p.masq_keys
               for s, e in names.masq_elements(k.split("/", 1)[1], p.masq_all))
    return (sorted(snap.map_keys(p.owner)) == sorted(p.keys) and all(snap.to[k] == p.targets[k] for k in p.dnat_keys)
            and snap.digests[p.owner] == p.digest and snap.identity(p.owner) == p.identity and masq)


def nothing_per_pod(snap: slow.Snapshot) -> bool:
    return (set(snap.chains) == set(planning.SKELETON_RULES) and snap.elements == {} and snap.own == {}
            and snap.to == {} and snap.digests == {} and not any(snap.set_elements.values()))


def test_map_layout_transactions_are_accepted_and_refused_as_the_table_says(lab):
    a = plan("a", "10.77.0.2", "fd00:77::2", conditions=False)
    b = plan("b", "10.77.0.3", "fd00:77::3", host_port_base=9090, conditions=False, masqAll=True)
    c = plan("c", "10.77.0.4", "fd00:77::4", conditions=False)  # every dnat key of a's

    # no table yet: the fast ADD is refused (ENOENT); the slow path declares and builds it all
    assert apply(lab, maps.claim(a)).startswith("2 ")
    declare(lab)
    assert apply(lab, slow.rebuild(snapshot(lab), add=a)) == ""
    assert held_in_maps(snapshot(lab), a)
    assert not any(ch.startswith(names.OWNED_CHAIN_PREFIXES) for ch in snapshot(lab).chains)
    for chain, count in planning.SKELETON_RULES.items():
        assert len(listed_rules(lab, chain)) == count
    assert apply(lab, planning.skeleton()) == ""  # idempotent

    # the fast ADD on free keys, and again (a retried ADD, a repair): the same transaction
    assert apply(lab, maps.claim(b)) == "" and apply(lab, maps.claim(b)) == ""
    assert held_in_maps(snapshot(lab), b)
    # a re-ADD with other mappings is refused: OWNERS holds another digest
    assert apply(lab, maps.claim(plan("b", "10.77.0.3", "fd00:77::3", conditions=False))).startswith("17 ")
    # DEL from the config, and again: nothing of b is left, nothing of a touched
    assert apply(lab, maps.release(b)) == "" and apply(lab, maps.release(b)) == ""
    snap = snapshot(lab)
    assert snap.owners() == [a.owner] and held_in_maps(snap, a)

    # c claims a's keys: refused (EEXIST); the slow path puts c in the chain layout, behind a
    assert apply(lab, maps.claim(c)).startswith("17 ")
    assert apply(lab, slow.rebuild(snapshot(lab), add=c)) == ""
    snap = snapshot(lab)
    assert held_in_maps(snap, a) and snap.digests[c.owner] == names.CHAIN_LAYOUT
    assert all(snap.elements[k] == names.dnat_chain(c.owner) for k in c.dnat_keys)
    assert listed_rules(lab, names.dnat_chain(c.owner)) == c.dnat_rules
    # a's DEL from its config is refused (c's claims in the chain layout) and so is c's through
    # the map layout (its digest is the chain layout's); the listing removes a alone
    assert apply(lab, maps.release(a)).startswith("17 ") and apply(lab, maps.release(c)).startswith("17 ")
    assert apply(lab, slow.rebuild(snapshot(lab), remove=[a.owner])) == ""
    snap = snapshot(lab)
    assert snap.owners() == [c.owner] and snap.own == {} and all(snap.elements[k] == names.dnat_chain(c.owner) for k in c.dnat_keys)
    # a's re-ADD now queues behind c (its claim is new), still through one transaction
    assert apply(lab, slow.rebuild(snapshot(lab), add=a)) == ""
    assert snapshot(lab).line(a.dnat_keys[0]) == [c.owner, a.owner]
    # c's re-ADD keeps it in the chain layout: a claims the same keys there
    assert apply(lab, slow.rebuild(snapshot(lab), add=c)) == ""
    assert snapshot(lab).line(a.dnat_keys[0]) == [c.owner, a.owner]
    # GC of both leaves the shared layout only
    assert apply(lab, slow.rebuild(snapshot(lab), remove=slow.stale_owners(snapshot(lab), NET, []))) == ""
    assert nothing_per_pod(snapshot(lab))


def test_a_re_add_moves_a_pod_of_the_chain_layout_into_the_maps_in_one_transaction(lab):
    """A pod of the previous release (its chains, no OWNERS element) whose keys nobody else
    claims: its next ADD (or the reconciler's repair) is refused fast, and the rebuild moves it."""
    old = plan("old", "10.77.0.2", "fd00:77::2", conditions=False)
    declare(lab)
    assert apply(lab, [c for c in planning.skeleton()] + planning.owner_chains(old, create=True)
                 + [planning.element(k, names.dnat_chain(old.owner)) for k in old.dnat_keys]
                 + [planning.element(k, names.masq_chain(old.owner)) for k in old.masq_keys]) == ""
    assert apply(lab, maps.claim(old)).startswith("17 ")  # the probe: its own chains claim the keys
    assert apply(lab, slow.rebuild(snapshot(lab), add=old)) == ""
    snap = snapshot(lab)
    assert held_in_maps(snap, old) and snap.elements == {} and set(snap.chains) == set(planning.SKELETON_RULES)


def test_chain_layout_transactions_are_accepted_and_read_back_as_planned(lab):
    """A config with conditions: its own chains, as before the map layout."""
    a = plan("a", "10.77.0.2", "fd00:77::2")
    b = plan("b", "10.77.0.3", "fd00:77::3", host_port_base=9090, masqAll=True)
    c = plan("c", "10.77.0.4", "fd00:77::4")  # shares every dnat key with a
    ca, cb = names.dnat_chain(a.owner), names.dnat_chain(b.owner)

    # no table yet: the fast ADD is refused (ENOENT) and the first ADD's rebuild creates it all
    assert apply(lab, planning.fast_add(a)).startswith("2 ")
    declare(lab)
    assert apply(lab, slow.rebuild(snapshot(lab), add=a)) == ""
    assert listed_rules(lab, ca) == a.dnat_rules  # the very expressions planned, comments included
    assert listed_rules(lab, names.masq_chain(a.owner)) == a.masq_rules
    for chain, count in planning.SKELETON_RULES.items():
        assert len(listed_rules(lab, chain)) == count
    assert apply(lab, planning.skeleton()) == ""  # idempotent
    assert set(snapshot(lab).elements) == set(a.dnat_keys + a.masq_keys)

    # a second container on free keys: the fast ADD; a repeat is refused (EEXIST)
    assert apply(lab, planning.fast_add(b)) == ""
    assert listed_rules(lab, cb) == b.dnat_rules and listed_rules(lab, names.masq_chain(b.owner)) == b.masq_rules
    assert apply(lab, planning.fast_add(b)).startswith("17 ")

    # c claims a's keys: the fast ADD is refused, the rebuild shares them through buckets
    assert apply(lab, planning.fast_add(c)).startswith("17 ")
    assert apply(lab, slow.rebuild(snapshot(lab), add=c)) == ""
    snap = snapshot(lab)
    for key in a.dnat_keys:
        assert snap.elements[key] == names.bucket_chain(key)
        assert snap.comments[names.bucket_chain(key)] == [a.owner, c.owner]  # oldest first

    # a re-ADD of a with snat off: its chains refilled in place, its masquerade chain dropped
    a2 = plan("a", "10.77.0.2", "fd00:77::2", snat=False)
    assert apply(lab, slow.rebuild(snapshot(lab), add=a2)) == ""
    assert listed_rules(lab, ca) == a2.dnat_rules
    assert names.masq_chain(a.owner) not in snapshot(lab).chains
    assert snapshot(lab).owners() == [a.owner, b.owner, c.owner]  # a keeps its place in line

    # DEL of b from its config, then again (nothing left: still accepted)
    assert apply(lab, planning.config_delete(b)) == ""
    assert apply(lab, planning.config_delete(b)) == ""
    assert cb not in snapshot(lab).chains and not any(k in snapshot(lab).elements for k in b.dnat_keys)

    # DEL of c: its keys are shared, so its DEL from the config is refused (EEXIST) ...
    assert apply(lab, planning.config_delete(c)).startswith("17 ")
    # ... and the rebuild hands every key back to a alone
    assert apply(lab, slow.rebuild(snapshot(lab), remove=[c.owner])) == ""
    snap = snapshot(lab)
    assert all(snap.elements[k] == ca for k in a2.dnat_keys) and not any(ch.startswith("b-") for ch in snap.chains)

    # GC of a (not among the valid attachments) leaves the shared layout only
    assert apply(lab, slow.rebuild(snapshot(lab), remove=slow.stale_owners(snapshot(lab), NET, ["b"]))) == ""
    assert nothing_per_pod(snapshot(lab))


def _old_text_script(p: planning.OwnerPlan) -> str:
    """What the text-writing portmap (before libnftables JSON) sent for :func:`_old_plan`'s first
    ADD, verbatim in its format: skeleton, then the container's chains, rules and elements."""
    t, c, m = names.FAMILY_TABLE, names.dnat_chain(p.owner), names.masq_chain(p.owner)
    cond = "ip saddr 10.0.0.0/8"
    return "\n".join([
        f'add table {t} {{ comment "{names.TABLE_COMMENT}"; }}',
        f"add map {t} dnat_any {{ type nf_proto . inet_proto . inet_service : verdict; }}",
        f"add map {t} dnat_ip4 {{ type ipv4_addr . inet_proto . inet_service : verdict; }}",
        f"add map {t} dnat_ip6 {{ type ipv6_addr . inet_proto . inet_service : verdict; }}",
        f"add map {t} masq4 {{ type ipv4_addr : verdict; }}",
        f"add map {t} masq6 {{ type ipv6_addr : verdict; }}",
        f"add chain {t} prerouting {{ type nat hook prerouting priority -100; policy accept; }}",
        f"add chain {t} output {{ type nat hook output priority -100; policy accept; }}",
        f"add chain {t} postrouting {{ type nat hook postrouting priority 95; policy accept; }}",
        f"add chain {t} hostports",
        f"add rule {t} prerouting fib daddr type local jump hostports",
        f"add rule {t} output fib daddr type local jump hostports",
        f"add rule {t} hostports ip daddr . meta l4proto . th dport vmap @dnat_ip4",
        f"add rule {t} hostports ip6 daddr . meta l4proto . th dport vmap @dnat_ip6",
        f"add rule {t} hostports meta nfproto . meta l4proto . th dport vmap @dnat_any",
        f"add rule {t} postrouting ct status dnat ip daddr vmap @masq4",
        f"add rule {t} postrouting ct status dnat ip6 daddr vmap @masq6",
        f'add chain {t} {c} {{ comment "{p.identity}"; }}',
        f'add rule {t} {c} continue comment "{p.identity}"',
        f'add rule {t} {c} {cond} meta nfproto ipv4 tcp dport 8080 dnat ip to 10.77.0.2:80 comment "any/4/tcp/8080"',
        f'add rule {t} {c} {cond} ip daddr 192.0.2.1 udp dport 8082 dnat ip to 10.77.0.2:5353 comment "ip/192.0.2.1/udp/8082"',
        f'add rule {t} {c} continue comment "masq/10.77.0.2"',
        f'add rule {t} {c} meta nfproto ipv6 tcp dport 8080 dnat ip6 to [fd00:77::2]:80 comment "any/6/tcp/8080"',
        f'add rule {t} {c} ip6 daddr 2001:db8::1 tcp dport 8083 dnat ip6 to [fd00:77::2]:8443 comment "ip/2001:db8::1/tcp/8083"',
        f'add rule {t} {c} continue comment "masq/fd00:77::2"',
        f'add chain {t} {m} {{ comment "{p.identity}"; }}',
        f"add rule {t} {m} ip daddr 10.77.0.2 ip saddr 10.77.0.2 masquerade",
        f"add rule {t} {m} ip daddr 10.77.0.2 ip saddr 127.0.0.1 masquerade",
        f"add rule {t} {m} ip6 daddr fd00:77::2 ip6 saddr fd00:77::2 masquerade",
        f"add element {t} dnat_any {{ ipv4 . tcp . 8080 : jump {c} }}",
        f"add element {t} dnat_ip4 {{ 192.0.2.1 . udp . 8082 : jump {c} }}",
        f"add element {t} dnat_any {{ ipv6 . tcp . 8080 : jump {c} }}",
        f"add element {t} dnat_ip6 {{ 2001:db8::1 . tcp . 8083 : jump {c} }}",
        f"add element {t} masq4 {{ 10.77.0.2 : jump {m} }}",
        f"add element {t} masq6 {{ fd00:77::2 : jump {m} }}",
    ]) + "\n"


def _old_plan(cid: str) -> planning.OwnerPlan:
    cfg = load({
        "cniVersion": "1.0.0", "name": NET, "type": "portmap", "conditionsV4": ["ip saddr 10.0.0.0/8"],
        "runtimeConfig": {"portMappings": [
            {"hostPort": 8080, "containerPort": 80},
            {"hostPort": 8082, "containerPort": 5353, "protocol": "udp", "hostIP": "192.0.2.1"},
            {"hostPort": 8083, "containerPort": 8443, "hostIP": "2001:db8::1"},
        ]},
    })
    return planning.plan_owner(NET, cid, cfg, {4: "10.77.0.2", 6: "fd00:77::2"})


def _without_handles(objects: list[dict]) -> list[dict]:
    out = []
    for obj in objects:
        [(kind, body)] = obj.items()
        if kind != "metainfo":
            out.append({kind: {k: v for k, v in body.items() if k != "handle"}})
    return out


def _per_container(objects: list[dict]) -> list[dict]:
    """The chain layout's objects of containers: their chains and rules, the verdict maps' elements."""
    out = []
    for obj in _without_handles(objects):
        [(kind, body)] = obj.items()
        if kind in ("chain", "rule") and str(body.get("chain", body.get("name"))).startswith(names.OWNED_CHAIN_PREFIXES):
            out.append(obj)
        elif kind == "map" and body["name"] in names.MAPS:
            out.append({kind: {"name": body["name"], "elem": body.get("elem", [])}})
    return out


def test_rules_written_as_text_by_the_text_writer_are_the_same_objects(lab):
    """A node upgraded mid-flight from the text-writing releases: the chain layout installs the
    objects the text writer did, as ``nft -j list`` shows them (that listing carries no table or
    chain comments, which libnftables 1.0.x also ignores in JSON input), and every path works on
    a table the text writer filled: its DNAT rules keep serving until the skeleton is rebuilt in
    one transaction."""
    old = _old_plan("old")
    lab.run(lab.node, "nft", "-f", "-", input=_old_text_script(old))
    from_text = _per_container(listing(lab))
    lab.run(lab.node, "nft", "delete", "table", names.FAMILY_TABLE)
    declare(lab)
    assert apply(lab, planning.skeleton() + planning.fast_add(old)) == ""
    assert _per_container(listing(lab)) == from_text

    # on the text-written table: a new container shares a key, the old one is deleted from its config
    lab.run(lab.node, "nft", "delete", "table", names.FAMILY_TABLE)
    lab.run(lab.node, "nft", "-f", "-", input=_old_text_script(old))
    new = plan("new", "10.77.0.9", "fd00:77::9", conditions=False)  # any/4/tcp/8080...: 8080 is shared
    assert apply(lab, maps.claim(new)).startswith("2 ")  # no OWNERS map yet
    declare(lab)
    assert apply(lab, slow.rebuild(snapshot(lab), add=new)) == ""
    assert snapshot(lab).comments[names.bucket_chain("any/4/tcp/8080")] == [old.owner, new.owner]
    assert apply(lab, planning.config_delete(old)).startswith("17 ")  # shared: the kernel refuses
    assert apply(lab, slow.rebuild(snapshot(lab), remove=[old.owner])) == ""
    snap = snapshot(lab)
    assert snap.owners() == [new.owner] and snap.elements["any/4/tcp/8080"] == names.dnat_chain(new.owner)
    assert apply(lab, planning.config_delete(new)) == ""
    assert nothing_per_pod(snapshot(lab))
