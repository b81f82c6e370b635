"""Pure planners of the bridge plugin: L3 plan from an IPAM result, nftables rule builders."""

from __future__ import annotations

import pytest

from cnichain.common.errors import CniError
from cnichain.common.types import DNS, IPConfig, Result, Route
from cnichain.plugins.bridge import rules
from cnichain.plugins.bridge.config import load
from cnichain.plugins.bridge.plan import PodRoute, plan_l3, result_dns


def cfg(**keys):
    return load({"cniVersion": "1.0.0", "name": "net", "ipam": {"type": "host-local"}, **keys})


def ipam(*addrs, routes=(), gateway=""):
    return Result(ips=[IPConfig(address=a, gateway=gateway) for a in addrs], routes=list(routes))


def test_missing_ips():
    with pytest.raises(CniError, match="IPAM plugin returned missing IP config") as info:
        plan_l3(Result(), cfg())
    assert info.value.code == 999


def test_gateway_defaults_to_first_address_when_is_gateway():
    plan = plan_l3(ipam("10.1.2.7/24", "fd00:1::9/64"), cfg(isGateway=True))
    assert [(ip.address, ip.gateway, ip.interface) for ip in plan.ips] == [
        ("10.1.2.7/24", "10.1.2.1", 2), ("fd00:1::9/64", "fd00:1::1", 2)]
    assert plan.bridge_addrs == ["10.1.2.1/24", "fd00:1::1/64"]
    assert plan.families == (4, 6) and plan.has_ipv6_gateway


def test_no_gateway_without_is_gateway():
    plan = plan_l3(ipam("10.1.2.7/24"), cfg())
    assert plan.ips[0].gateway == "" and plan.bridge_addrs == []


def test_ipam_gateway_kept_and_routes_resolved():
    plan = plan_l3(ipam("10.1.2.7/24", routes=[Route("0.0.0.0/0"), Route("10.9.0.0/16", gw="10.1.2.254")],
                        gateway="10.1.2.1"), cfg(isGateway=True))
    assert plan.pod_routes == [PodRoute("0.0.0.0/0", "10.1.2.1"), PodRoute("10.9.0.0/16", "10.1.2.254")]
    assert plan.routes == [Route("0.0.0.0/0"), Route("10.9.0.0/16", gw="10.1.2.254")]


def test_default_gateway_appended_once_per_family():
    plan = plan_l3(ipam("10.1.2.7/24", "fd00:1::9/64"), cfg(isDefaultGateway=True))
    assert plan.routes == [Route("0.0.0.0/0", gw="10.1.2.1"), Route("::/0", gw="fd00:1::1")]


def test_default_gateway_not_added_when_ipam_has_one_with_gw():
    plan = plan_l3(ipam("10.1.2.7/24", routes=[Route("0.0.0.0/0", gw="10.1.2.9")]), cfg(isDefaultGateway=True))
    assert plan.routes == [Route("0.0.0.0/0", gw="10.1.2.9")]


def test_dns_config_overrides_ipam():
    res = ipam("10.1.2.7/24")
    res.dns = DNS(nameservers=["1.1.1.1"])
    assert result_dns(cfg(), res).nameservers == ["1.1.1.1"]
    assert result_dns(cfg(dns={"nameservers": ["9.9.9.9"]}), res).nameservers == ["9.9.9.9"]


# -- nftables --------------------------------------------------------------------------------------

def test_owner_tag_and_comment():
    tag = rules.owner_tag("net", "ctr1", "eth0")
    assert len(tag) == 33 and tag[16] == "-"
    text = rules.comment("net", "ctr1", "eth0")
    assert text.startswith(tag) and text.endswith("net: net, if: eth0, id: ctr1")
    assert len(rules.comment("n" * 100, "c" * 64, "eth0")) == 128


def _listing(*rules):
    return [{"metainfo": {}}, {"chain": {"name": "postrouting"}}] + [{"rule": r} for r in rules]


def test_owned_handles_and_gc():
    mine = rules.comment("net", "a", "eth0")
    other = rules.comment("net", "b", "eth0")
    foreign = rules.comment("othernet", "a", "eth0")
    listing = _listing({"handle": 4, "comment": mine}, {"handle": 5, "comment": other},
                       {"handle": 6, "comment": foreign}, {"handle": 7})
    assert rules.owned_handles(listing, rules.owner_tag("net", "a", "eth0")) == [4]
    assert rules.owned_handles(None, "x") == []
    keep = {rules.owner_tag("net", "a", "eth0")}
    assert rules.stale_for_gc(listing, "net", keep) == [5]


def test_spoof_rule():
    cmds = rules.spoof_add("veth12345678", "02:00:00:00:00:01", "c", [])
    rule = cmds[-1]["add"]["rule"]
    assert rule["family"] == "bridge" and rule["expr"][0]["match"]["right"] == "veth12345678"
    assert rule["expr"][1]["match"]["op"] == "!=" and rule["expr"][2] == {"drop": None}
    assert cmds[1]["add"]["chain"]["prio"] == -300


# -- masquerade in maps ----------------------------------------------------------------------------

def test_owner_value_is_the_owner_tag_and_reads_back():
    owner = rules.owner_addr("net", "a", "eth0")
    assert rules.tag_of_owner(owner) == rules.owner_tag("net", "a", "eth0")
    assert rules.owner_addr("net", "b", "eth0") != owner and rules.tag_of_owner("not an address") == ""


def test_pods_of_a_subnet_share_its_chain_and_other_subnets_do_not():
    assert rules.net_chain("10.1.0.5/24") == rules.net_chain("10.1.0.9/24") != rules.net_chain("10.1.1.5/24")
    assert rules.net_chain("fd00::5/64").startswith(rules.NET_CHAIN_PREFIX)


def test_release_claims_before_it_deletes_each_element():
    cmds = rules.masq_release(["10.1.0.5/24", "fd00::5/64"], "::1")
    verbs = [(verb, body["element"]["name"]) for c in cmds for verb, body in c.items()]
    assert verbs == [("add", "pod_owners4"), ("delete", "pod_owners4"), ("add", "pod_nets4"), ("delete", "pod_nets4"),
                     ("add", "pod_owners6"), ("delete", "pod_owners6"), ("add", "pod_nets6"), ("delete", "pod_nets6")]
    assert cmds[0]["add"]["element"]["elem"] == [["10.1.0.5", "::1"]] and cmds[1]["delete"]["element"]["elem"] == ["10.1.0.5"]


def test_skeleton_rewrites_the_dispatch_and_each_subnet_chain_once():
    cmds = rules.masq_skeleton(["10.1.0.5/24", "10.1.0.6/24", "fd00::5/64"])
    flushed = [c["flush"]["chain"]["name"] for c in cmds if "flush" in c]
    assert flushed == [rules.PODS_CHAIN, rules.net_chain("10.1.0.5/24"), rules.net_chain("fd00::5/64")]
    net4 = [c["add"]["rule"]["expr"] for c in cmds if "rule" in c.get("add", {})
            and c["add"]["rule"]["chain"] == rules.net_chain("10.1.0.5/24")]
    assert net4 == [[{"match": {"op": "!=", "left": {"payload": {"protocol": "ip", "field": "daddr"}},
                                "right": {"prefix": {"addr": "10.1.0.0", "len": 24}}}},
                     {"match": {"op": "!=", "left": {"payload": {"protocol": "ip", "field": "daddr"}},
                                "right": {"prefix": {"addr": "224.0.0.0", "len": 4}}}},
                     {"masquerade": None}]]
    net6 = [c["add"]["rule"]["expr"] for c in cmds if "rule" in c.get("add", {})
            and c["add"]["rule"]["chain"] == rules.net_chain("fd00::5/64")]
    assert net6[0][0]["match"]["right"] == {"prefix": {"addr": "fd00::", "len": 64}}
    assert net6[0][1]["match"]["right"] == {"prefix": {"addr": "ff00::", "len": 8}}
    assert net6[0][0]["match"]["left"]["payload"]["protocol"] == "ip6"


def test_held_reads_owner_comment_and_chain_and_an_unowned_net_element():
    owners = [{"map": {"name": "pod_owners4", "elem": [[{"elem": {"val": "10.1.0.5", "comment": "c"}}, "::1"]]}}]
    nets = [{"map": {"name": "pod_nets4", "elem": [["10.1.0.5", {"jump": {"target": "net-x"}}],
                                                    ["10.1.0.6", {"jump": {"target": "net-x"}}]]}}]
    assert rules.held_in(owners + nets) == {"10.1.0.5": ("::1", "c", "net-x"), "10.1.0.6": ("", "", "net-x")}
    drop = rules.masq_drop({"10.1.0.5": ("::1", "net-x"), "10.1.0.6": ("", "net-x")}, ["10.1.0.5/24", "10.1.0.6/24"])
    assert [(v, b["element"]["name"]) for c in drop for v, b in c.items()] == [
        ("delete", "pod_owners4"), ("delete", "pod_nets4"), ("delete", "pod_nets4")]


def test_dispatched_families_reads_the_pods_chain():
    listing = [{"rule": {"chain": "pods", "expr": [{"vmap": {"key": {}, "data": "@pod_nets4"}}]}},
               {"rule": {"chain": "pods", "expr": [{"accept": None}]}},
               {"rule": {"chain": "elsewhere", "expr": [{"vmap": {"key": {}, "data": "@pod_nets6"}}]}}]
    assert rules.dispatched_families(listing) == {4} and rules.dispatched_families(None) == set()
