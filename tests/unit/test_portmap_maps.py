"""portmap's map layout (planner side): one transaction per ADD and per DEL, no listing, every
element claimed with its value before anything is deleted."""

from __future__ import annotations

from cnichain.plugins.portmap import maps, names, plan as planning
from cnichain.plugins.portmap.config import load
from tests.portmap_json import briefs


def plan(cid="a", ips=None, *mappings, **extra):
    cfg = load({"runtimeConfig": {"portMappings": list(mappings) or [{"hostPort": 8080, "containerPort": 80}]},
                **extra})
    return planning.plan_owner("pmnet", cid, cfg, ips or {4: "10.1.0.5"})


def test_claim_adds_every_element_with_its_value_after_probing_the_chain_layout():
    p = plan("a", {4: "10.1.0.5", 6: "fd00::5"}, {"hostPort": 8080, "containerPort": 80},
             {"hostPort": 53, "containerPort": 5353, "protocol": "udp", "hostIP": "192.0.2.1"})
    o = p.owner
    assert briefs(maps.claim(p)) == [
        ("add", "element", "owners", o, p.digest),
        ("create", "element", "dnat_any", "any/4/tcp/8080", "accept"),
        ("delete", "element", "dnat_any", "any/4/tcp/8080", None),
        ("create", "element", "dnat_ip4", "ip/192.0.2.1/udp/53", "accept"),
        ("delete", "element", "dnat_ip4", "ip/192.0.2.1/udp/53", None),
        ("create", "element", "dnat_any", "any/6/tcp/8080", "accept"),
        ("delete", "element", "dnat_any", "any/6/tcp/8080", None),
        ("create", "element", "masq4", "masq/10.1.0.5", "accept"),
        ("delete", "element", "masq4", "masq/10.1.0.5", None),
        ("create", "element", "masq6", "masq/fd00::5", "accept"),
        ("delete", "element", "masq6", "masq/fd00::5", None),
        ("add", "element", "own_any", "any/4/tcp/8080", o),
        ("add", "element", "to_any4", "any/4/tcp/8080", ("10.1.0.5", 80)),
        ("add", "element", "own_ip4", "ip/192.0.2.1/udp/53", o),
        ("add", "element", "to_ip4", "ip/192.0.2.1/udp/53", ("10.1.0.5", 5353)),
        ("add", "element", "own_any", "any/6/tcp/8080", o),
        ("add", "element", "to_any6", "any/6/tcp/8080", ("fd00::5", 80)),
        ("add", "element", "own_masq4", "masq/10.1.0.5", o),
        ("add", "element", "hairpin4", '{"concat": ["10.1.0.5", "10.1.0.5"]}', None),
        ("add", "element", "hairpin4", '{"concat": ["10.1.0.5", "127.0.0.1"]}', None),
        ("add", "element", "own_masq6", "masq/fd00::5", o),
        ("add", "element", "hairpin6", '{"concat": ["fd00::5", "fd00::5"]}', None),
    ]
    # the owner is the container's 128-bit hash as an IPv6 address; the OWNERS key carries the identity
    first = maps.claim(p)[0]["add"]["element"]["elem"][0]
    assert first[0] == {"elem": {"val": names.as_addr(o), "comment": p.identity}}
    assert names.from_addr(first[0]["elem"]["val"]) == o


def test_masq_all_and_snat_off():
    everyone = plan("a", None, {"hostPort": 8080, "containerPort": 80}, masqAll=True)
    assert [b for b in briefs(maps.claim(everyone)) if b[2].startswith(("hairpin", "masqall"))] == [
        ("add", "element", "masqall4", '"10.1.0.5"', None)]
    nobody = plan("a", None, {"hostPort": 8080, "containerPort": 80}, snat=False)
    assert not any(b[2].startswith(("own_masq", "hairpin", "masqall")) for b in briefs(maps.claim(nobody)))


def test_release_is_the_claim_then_the_delete_of_every_element():
    p = plan()
    commands = maps.release(p)
    claim = maps.claim(p)
    assert commands[:len(claim)] == claim
    deletes = briefs(commands[len(claim):])
    assert [d[0] for d in deletes] == ["delete"] * len(deletes)
    assert {(d[2], d[3]) for d in deletes} == {(name, b[3]) for b in briefs(claim) if b[0] == "add"
                                                for name in [b[2]]}


def test_the_digest_changes_with_what_is_installed_and_only_with_it():
    base = plan()
    assert plan().digest == base.digest and plan("b").digest == base.digest  # the owner is not in it
    assert plan("a", {4: "10.1.0.6"}).digest != base.digest
    assert plan("a", None, {"hostPort": 8081, "containerPort": 80}).digest != base.digest
    assert plan("a", None, {"hostPort": 8080, "containerPort": 81}).digest != base.digest
    assert plan("a", None, {"hostPort": 8080, "containerPort": 80}, masqAll=True).digest != base.digest
    assert plan("a", None, {"hostPort": 8080, "containerPort": 80}, snat=False).digest != base.digest
    assert names.CHAIN_LAYOUT not in (base.digest, plan("b").digest)


def test_a_config_with_conditions_is_the_chain_layouts():
    assert plan("a", None, {"hostPort": 8080, "containerPort": 80}, conditionsV4=["ip saddr 10.0.0.0/8"]).conditioned
    # conditions of a family without a mapped address change nothing
    assert not plan("a", None, {"hostPort": 8080, "containerPort": 80}, conditionsV6=["ip6 saddr fd00::/8"]).conditioned
