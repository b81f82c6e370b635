"""portmap's iptables-style conditionsV4/V6 (the reference's default backend), translated to the
libnftables JSON matches the planner puts in front of each DNAT rule."""

from __future__ import annotations

import pytest

from cnichain.plugins.portmap.conditions import Refused
from cnichain.plugins.portmap.config import load
from cnichain.plugins.portmap.ipt_conditions import is_iptables_style, translate


def match(left, right, op="=="):
    return {"match": {"op": op, "left": left, "right": right}}


def payload(proto, field):
    return {"payload": {"protocol": proto, "field": field}}


def meta(key):
    return {"meta": {"key": key}}


@pytest.mark.parametrize(
    "tokens,family,want",
    [
        # the reference README's own example
        (["!", "-d", "192.0.2.0/24"], 4, [match(payload("ip", "daddr"), {"prefix": {"addr": "192.0.2.0", "len": 24}}, "!=")]),
        (["-s", "10.0.0.1"], 4, [match(payload("ip", "saddr"), "10.0.0.1")]),
        (["--source", "10.0.0.1/32,10.1.0.0/16"], 4,
         [match(payload("ip", "saddr"), {"set": ["10.0.0.1", {"prefix": {"addr": "10.1.0.0", "len": 16}}]})]),
        (["-d", "fd00::/8"], 6, [match(payload("ip6", "daddr"), {"prefix": {"addr": "fd00::", "len": 8}})]),
        (["-i", "eth0"], 4, [match(meta("iifname"), "eth0")]),
        (["!", "-o", "eth+"], 6, [match(meta("oifname"), "eth*", "!=")]),
        (["-p", "tcp", "--dport", "8080"], 4, [match(meta("l4proto"), "tcp"), match(payload("tcp", "dport"), 8080)]),
        (["-p", "udp", "!", "--sport", "1000:2000"], 4,
         [match(meta("l4proto"), "udp"), match(payload("udp", "sport"), {"range": [1000, 2000]}, "!=")]),
        (["-p", "tcp", "-m", "tcp", "--dport", ":1024"], 4,
         [match(meta("l4proto"), "tcp"), match(payload("tcp", "dport"), {"range": [0, 1024]})]),
        (["-p", "ipv6-icmp"], 6, [match(meta("l4proto"), "icmpv6")]),
        (["-p", "all"], 4, []),
        (["-m", "comment", "--comment", "from the LB only", "-s", "10.0.0.0/8"], 4,
         [match(payload("ip", "saddr"), {"prefix": {"addr": "10.0.0.0", "len": 8}})]),
    ],
)
def test_translated(tokens, family, want):
    assert is_iptables_style(tuple(tokens))
    assert translate(tuple(tokens), family) == want


@pytest.mark.parametrize(
    "tokens,family,names",
    [
        (["-m", "mark", "--mark", "1"], 4, "'mark'"),
        (["-j", "DROP"], 4, "'-j'"),
        (["--dport", "80"], 4, "'--dport' needs -p"),
        (["-s", "fd00::1"], 4, "'fd00::1'"),
        (["-d", "10.0.0.1"], 6, "'10.0.0.1'"),
        (["-p", "gre"], 4, "'gre'"),
        (["-p", "tcp", "--dport", "http"], 4, "'http'"),
        (["!"], 4, "'!'"),
        (["-s"], 4, "'-s' without a value"),
        (["-m", "comment", "x"], 4, "--comment"),
        (["-i", "@set"], 4, "'@set'"),
    ],
)
def test_outside_the_subset_names_the_token(tokens, family, names):
    with pytest.raises(Refused) as info:
        translate(tuple(tokens), family)
    assert names in str(info.value)


def test_config_keeps_translated_matches_per_family():
    cfg = load({"name": "n", "conditionsV4": ["!", "-d", "192.0.2.0/24"], "conditionsV6": ["-i", "eth1"]})
    assert cfg.conditions(4) == [match(payload("ip", "daddr"), {"prefix": {"addr": "192.0.2.0", "len": 24}}, "!=")]
    assert cfg.conditions(6) == [match(meta("iifname"), "eth1")]


def test_nft_text_is_not_iptables_style():
    assert not is_iptables_style(("ip saddr 10.0.0.1",))
    assert not is_iptables_style(())
