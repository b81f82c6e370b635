"""Reading portmap's table back (plugins/portmap/listing.py): what ``cnichain inspect`` shows is
what the planner wrote, read from the libnftables JSON the kernel lists."""

from __future__ import annotations

from cnichain.plugins.portmap import conditions, listing, names, plan
from cnichain.plugins.portmap.config import load

CONF = {
    "cniVersion": "1.0.0", "name": "k8s", "type": "portmap",
    "conditionsV4": ["ip saddr 10.0.0.0/8", 'iifname != { "eth0", "ens*" }'],
    "runtimeConfig": {"portMappings": [
        {"hostPort": 8080, "containerPort": 80, "protocol": "tcp"},
        {"hostPort": 53, "containerPort": 5353, "protocol": "udp", "hostIP": "192.0.2.1"},
    ]},
}


def listed(owner_plan: plan.OwnerPlan) -> list[dict]:
    """The chain's rules the way ``nft -j list table`` prints them (location, handle, body)."""
    chain = names.dnat_chain(owner_plan.owner)
    out: list[dict] = [{"chain": {"family": names.FAMILY, "table": names.TABLE, "name": chain, "handle": 7}}]
    for handle, body in enumerate(owner_plan.dnat_rules, 8):
        out.append({"rule": {"family": names.FAMILY, "table": names.TABLE, "chain": chain, "handle": handle, **body}})
    return out


def test_planned_rules_read_back_as_mappings():
    owner_plan = plan.plan_owner("k8s", "abc123", load(CONF), {4: "10.1.0.5", 6: "fd00::5"})
    got = [(m.network, m.container_id, m.protocol, m.host_ip, m.host_port, m.family, m.pod_ip, m.pod_port,
            m.conditions) for m in listing.mappings_in(listed(owner_plan))]
    cond = 'ip saddr 10.0.0.0/8 iifname != { "eth0", "ens*" }'
    assert got == [
        ("k8s", "abc123", "tcp", "", 8080, 4, "10.1.0.5", 80, cond),
        ("k8s", "abc123", "udp", "192.0.2.1", 53, 4, "10.1.0.5", 5353, cond),
        ("k8s", "abc123", "tcp", "", 8080, 6, "fd00::5", 80, ""),
    ]


def test_rules_of_other_chains_and_foreign_rules_are_not_mappings():
    owner_plan = plan.plan_owner("k8s", "abc123", load(CONF), {4: "10.1.0.5"})
    objects = listed(owner_plan)
    objects.append({"rule": {"family": "inet", "table": names.TABLE, "chain": "hostports", "expr": []}})
    objects.append({"rule": {"family": "inet", "table": names.TABLE, "chain": objects[1]["rule"]["chain"],
                             "expr": [{"counter": None}]}})
    assert len(listing.mappings_in(objects)) == 2
    unnamed = [o for o in objects if "id " not in str(o.get("rule", {}).get("comment", ""))]
    assert {(m.network, m.container_id) for m in listing.mappings_in(unnamed)} == {("", "")}


def test_identity_comment_round_trip():
    assert listing.identity_of(names.identity_comment("k8s", "abc/1")) == ("k8s", "abc/1")
    assert listing.identity_of("any/4/tcp/80") is None


def test_conditions_render_is_the_inverse_of_parse():
    for text in ("ip saddr 10.0.0.0/8", "ip6 daddr != fd00::/8", "tcp dport { 80, 1000-2000 }",
                 'oifname "eth*"', "meta l4proto != icmp"):
        assert conditions.render(conditions.parse(text)) == text
    assert conditions.render([{"counter": None}]) == '{"counter": null}'
