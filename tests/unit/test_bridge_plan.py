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


def test_masq_rule_excludes_subnet_and_multicast():
    rule = rules.masq_rule("10.1.2.7/24", "tag")["add"]["rule"]
    assert rule["family"] == "inet" and rule["table"] == rules.MASQ_TABLE
    exprs = rule["expr"]
    assert exprs[0]["match"]["right"] == "10.1.2.7"
    assert exprs[1]["match"] == {"op": "!=", "left": {"payload": {"protocol": "ip", "field": "daddr"}},
                                 "right": {"prefix": {"addr": "10.1.2.0", "len": 24}}}
    assert exprs[2]["match"]["right"] == {"prefix": {"addr": "224.0.0.0", "len": 4}}
    assert exprs[3] == {"masquerade": None}
    v6 = rules.masq_rule("fd00::5/64", "tag")["add"]["rule"]["expr"]
    assert v6[0]["match"]["left"]["payload"]["protocol"] == "ip6"
    assert v6[2]["match"]["right"] == {"prefix": {"addr": "ff00::", "len": 8}}


def test_masq_add_is_one_transaction_replacing_stale_rules():
    cmds = rules.masq_add(["10.1.2.7/24", "fd00::5/64"], "c", [11, 12])
    kinds = [next(iter(c)) + ":" + next(iter(next(iter(c.values())))) for c in cmds]
    assert kinds == ["add:table", "add:chain", "delete:rule", "delete:rule", "add:rule", "add:rule"]


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
