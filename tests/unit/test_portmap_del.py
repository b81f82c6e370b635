"""portmap's DEL from the config (planner side): one self-checking transaction, no listing."""

from __future__ import annotations

import hashlib

from cnichain.plugins.portmap import names, plan as planning
from cnichain.plugins.portmap.config import load
from tests.portmap_json import briefs


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
    commands = planning.config_delete(p)
    assert briefs(commands) == [
        ("add", "element", "owners", p.owner, names.CHAIN_LAYOUT),
        ("delete", "element", "owners", p.owner, None),
        ("add", "chain", c),
        ("add", "chain", m),
        ("add", "element", "dnat_any", "any/4/tcp/8080", c),
        ("add", "element", "dnat_any", "any/6/tcp/8080", c),
        ("add", "element", "masq4", "masq/10.1.0.5", m),
        ("add", "element", "masq6", "masq/fd00::5", m),
        ("delete", "element", "dnat_any", "any/4/tcp/8080", None),
        ("delete", "element", "dnat_any", "any/6/tcp/8080", None),
        ("delete", "element", "masq4", "masq/10.1.0.5", None),
        ("delete", "element", "masq6", "masq/fd00::5", None),
        ("flush", "chain", c),
        ("delete", "chain", c),
        ("flush", "chain", m),
        ("delete", "chain", m),
    ]
    # the exact libnftables JSON of one assertion and one deletion
    assert commands[4] == {"add": {"element": {
        "family": "inet", "table": "cnichain_portmap", "name": "dnat_any",
        "elem": [[{"concat": ["ipv4", "tcp", 8080]}, {"jump": {"target": c}}]]}}}
    assert commands[10] == {"delete": {"element": {
        "family": "inet", "table": "cnichain_portmap", "name": "masq4", "elem": ["10.1.0.5"]}}}


def test_config_delete_without_snat_still_claims_the_masquerade_chain():
    # If ADD ran with snat on and DEL's config has it off, the masquerade elements still point at
    # m-<owner>: deleting that chain must fail the transaction rather than leak it.
    lines = briefs(planning.config_delete(plan(snat=False)))
    owner = plan().owner
    assert ("delete", "chain", f"m-{owner}") in lines and not any("masq4" in line for line in lines)


def test_config_delete_never_creates_anything_that_survives():
    lines = briefs(planning.config_delete(plan("a", None, 80, 81)))
    for line in lines:
        if line[:2] == ("add", "chain"):
            assert ("delete", "chain", line[2]) in lines
        elif line[:2] == ("add", "element"):
            assert line[3] is not None and ("delete", "element", line[2], line[3], None) in lines
        else:
            assert line[0] == "delete" or line[:2] == ("flush", "chain"), line
