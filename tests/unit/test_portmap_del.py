"""portmap's DEL from the config (planner side): one self-checking transaction, no listing."""

from __future__ import annotations

import hashlib

from cnichain.plugins.portmap import names, plan as planning
from cnichain.plugins.portmap.config import load

T = names.T


def plan(cid="a", ips=None, *ports, snat=True):
    maps = [{"hostPort": p, "containerPort": 80} for p in ports or (8080,)]
    cfg = load({"snat": snat, "runtimeConfig": {"portMappings": maps}})
    return planning.plan_owner("pmnet", cid, cfg, ips or {4: "10.1.0.5"})


def test_owner_ids_use_plain_sha256():
    # The built-in SHA-256 module must give exactly hashlib's digest: chain names already in
    # kernels were derived with it.
    h = hashlib.sha256()
    for part in ("portmap", "pmnet", "ctr"):
        h.update(part.encode() + b"\0")
    assert names.owner_id("pmnet", "ctr") == h.hexdigest()[:32]
    assert names.bucket_chain("any/4/tcp/80") == "b-" + hashlib.sha256(b"bucket\0any/4/tcp/80\0").hexdigest()[:32]


def test_config_delete_asserts_then_deletes_exactly_the_planned_objects():
    p = plan("a", {4: "10.1.0.5", 6: "fd00::5"}, 8080)
    c, m = f"c-{p.owner}", f"m-{p.owner}"
    assert planning.config_delete(p).splitlines() == [
        f"add chain {T} {c}",
        f"add chain {T} {m}",
        f"add element {T} dnat_any {{ ipv4 . tcp . 8080 : jump {c} }}",
        f"add element {T} dnat_any {{ ipv6 . tcp . 8080 : jump {c} }}",
        f"add element {T} masq4 {{ 10.1.0.5 : jump {m} }}",
        f"add element {T} masq6 {{ fd00::5 : jump {m} }}",
        f"delete element {T} dnat_any {{ ipv4 . tcp . 8080 }}",
        f"delete element {T} dnat_any {{ ipv6 . tcp . 8080 }}",
        f"delete element {T} masq4 {{ 10.1.0.5 }}",
        f"delete element {T} masq6 {{ fd00::5 }}",
        f"flush chain {T} {c}",
        f"delete chain {T} {c}",
        f"flush chain {T} {m}",
        f"delete chain {T} {m}",
    ]


def test_config_delete_without_snat_still_claims_the_masquerade_chain():
    # If ADD ran with snat on and DEL's config has it off, the masquerade elements still point at
    # m-<owner>: deleting that chain must fail the transaction rather than leak it.
    lines = planning.config_delete(plan(snat=False)).splitlines()
    owner = plan().owner
    assert f"delete chain {T} m-{owner}" in lines and not any("masq4" in line for line in lines)


def test_config_delete_never_creates_anything_that_survives():
    lines = planning.config_delete(plan("a", None, 80, 81)).splitlines()
    for line in lines:
        if line.startswith(f"add chain {T} "):
            assert line.replace("add chain", "delete chain") in lines
        elif line.startswith(f"add element {T} "):
            key = line.split(" { ")[1].split(" : ")[0]
            name = line.split(" ")[4]
            assert f"delete element {T} {name} {{ {key} }}" in lines
        else:
            assert line.startswith(("delete ", "flush chain ")), line
