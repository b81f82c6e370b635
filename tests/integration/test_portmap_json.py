"""Every command list portmap's planner emits, applied by the real libnftables in a lab namespace.

The unit tests check the JSON's shape; this checks that the kernel's libnftables accepts each
transaction as built (through ``common.nft.apply``, the plugin's own path) and that what it
installs reads back as planned: the DNAT and masquerade rules list with exactly the planned
expressions, and the map elements map back to the planned dispatch keys.  The config covers
conditions for both families, hostIPs of both families, IPv6, UDP, and snat/masqAll on and off.
"""

from __future__ import annotations

import json
import sys

import pytest

from cnichain.plugins.portmap import names, plan as planning, rebuild as slow
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


def plan(cid: str, ip4: str, ip6: str, *, host_port_base: int = 8080, **extra) -> planning.OwnerPlan:
    mappings = [
        {"hostPort": host_port_base, "containerPort": 80, "protocol": "tcp"},
        {"hostPort": host_port_base + 2, "containerPort": 5353, "protocol": "udp", "hostIP": "192.0.2.1"},
        {"hostPort": host_port_base + 3, "containerPort": 8443, "protocol": "tcp", "hostIP": "2001:db8::1"},
        {"hostPort": host_port_base + 1, "containerPort": 81, "protocol": "udp", "hostIP": "::"},
    ]
    cfg = load({
        "cniVersion": "1.0.0", "name": NET, "type": "portmap",
        "conditionsV4": ["ip saddr { 10.0.0.0/8, 192.168.0.0/16 } iifname != veth*", "ip daddr != 192.0.2.77"],
        "conditionsV6": ["ip6", "saddr", "fd00::/8", 'oifname "eth0"'],
        "runtimeConfig": {"portMappings": mappings}, **extra,
    })
    return planning.plan_owner(NET, cid, cfg, {4: ip4, 6: ip6})


def test_every_planned_transaction_is_accepted_and_reads_back_as_planned(lab):
    a = plan("a", "10.77.0.2", "fd00:77::2")
    b = plan("b", "10.77.0.3", "fd00:77::3", host_port_base=9090, masqAll=True)
    c = plan("c", "10.77.0.4", "fd00:77::4")  # shares every dnat key with a
    ca, cb = names.dnat_chain(a.owner), names.dnat_chain(b.owner)

    # no table yet: the fast ADD is refused (ENOENT) and the first ADD's rebuild creates it all
    assert apply(lab, planning.fast_add(a)).startswith("2 ")
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

    # DEL of c: its keys are shared, so the listing-based fast DEL is refused (EBUSY) ...
    comments = [r.get("comment", "") for r in listed_rules(lab, names.dnat_chain(c.owner))]
    assert apply(lab, planning.fast_delete(c.owner, comments)).startswith("16 ")
    # ... and the rebuild hands every key back to a alone
    assert apply(lab, slow.rebuild(snapshot(lab), remove=[c.owner])) == ""
    snap = snapshot(lab)
    assert all(snap.elements[k] == ca for k in a2.dnat_keys) and not any(ch.startswith("b-") for ch in snap.chains)

    # GC of a (not among the valid attachments) leaves the shared layout only
    assert apply(lab, slow.rebuild(snapshot(lab), remove=slow.stale_owners(snapshot(lab), NET, ["b"]))) == ""
    snap = snapshot(lab)
    assert snap.elements == {} and set(snap.chains) == set(planning.SKELETON_RULES)


def test_fast_delete_from_a_listing_is_accepted(lab):
    a = plan("a", "10.77.0.2", "fd00:77::2")
    assert apply(lab, slow.rebuild(snapshot(lab), add=a)) == ""
    comments = [r.get("comment", "") for r in listed_rules(lab, names.dnat_chain(a.owner))]
    assert apply(lab, planning.fast_delete(a.owner, comments)) == ""
    snap = snapshot(lab)
    assert snap.elements == {} and set(snap.chains) == set(planning.SKELETON_RULES)


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


def test_rules_written_as_text_by_the_previous_version_are_the_same_objects(lab):
    """A node upgraded mid-flight: the JSON writer installs the objects the text writer did, as
    ``nft -j list`` shows them (that listing carries no table or chain comments, which
    libnftables 1.0.x also ignores in JSON input), and works on a table the text writer filled."""
    old = _old_plan("old")
    lab.run(lab.node, "nft", "-f", "-", input=_old_text_script(old))
    from_text = _without_handles(listing(lab))
    lab.run(lab.node, "nft", "delete", "table", names.FAMILY_TABLE)
    assert apply(lab, planning.skeleton() + planning.fast_add(old)) == ""
    assert _without_handles(listing(lab)) == from_text

    # on the text-written table: a new container shares a key, the old one is deleted from its config
    lab.run(lab.node, "nft", "delete", "table", names.FAMILY_TABLE)
    lab.run(lab.node, "nft", "-f", "-", input=_old_text_script(old))
    new = plan("new", "10.77.0.9", "fd00:77::9")  # any/4/tcp/8080 and any/6/udp/8081...: 8080 is shared
    assert apply(lab, planning.fast_add(new)).startswith("17 ")
    assert apply(lab, slow.rebuild(snapshot(lab), add=new)) == ""
    assert snapshot(lab).comments[names.bucket_chain("any/4/tcp/8080")] == [old.owner, new.owner]
    assert apply(lab, planning.config_delete(old)).startswith("17 ")  # shared: the kernel refuses
    assert apply(lab, slow.rebuild(snapshot(lab), remove=[old.owner])) == ""
    snap = snapshot(lab)
    assert snap.owners() == [new.owner] and snap.elements["any/4/tcp/8080"] == names.dnat_chain(new.owner)
    assert apply(lab, planning.config_delete(new)) == ""
    assert snapshot(lab).elements == {}
