"""portmap's conditionsV4/V6: only the documented match subset, parsed into libnftables JSON matches."""

from __future__ import annotations

import pytest

from cnichain.common.errors import CniError, Code
from cnichain.plugins.portmap.conditions import Refused, parse
from cnichain.plugins.portmap.config import load


def conf(**extra):
    return {"cniVersion": "1.0.0", "name": "pmnet", "type": "portmap", **extra}


def saddr(version: int = 4) -> dict:
    return {"payload": {"protocol": "ip" if version == 4 else "ip6", "field": "saddr"}}


def match(left: dict, right, op: str = "==") -> dict:
    return {"match": {"op": op, "left": left, "right": right}}


IP_DADDR = {"payload": {"protocol": "ip", "field": "daddr"}}


def prefix(addr: str, length: int) -> dict:
    return {"prefix": {"addr": addr, "len": length}}


def meta(key: str) -> dict:
    return {"meta": {"key": key}}


def port(proto: str, field_: str) -> dict:
    return {"payload": {"protocol": proto, "field": field_}}


@pytest.mark.parametrize(
    "text, matches",
    [
        ("ip saddr 10.0.0.0/8", [match(saddr(), prefix("10.0.0.0", 8))]),
        ("ip saddr 10.0.0.5/8", [match(saddr(), prefix("10.0.0.0", 8))]),  # a prefix is its network
        ("ip daddr != 192.0.2.1", [match(IP_DADDR, "192.0.2.1", "!=")]),
        ("ip6 saddr == fd00::/8", [match(saddr(6), prefix("fd00::", 8))]),
        ("ip saddr {10.0.0.1,10.0.0.2 , 10.1.0.0/16}",
         [match(saddr(), {"set": ["10.0.0.1", "10.0.0.2", prefix("10.1.0.0", 16)]})]),
        ('iifname "eth1"', [match(meta("iifname"), "eth1")]),
        ("oifname != veth*", [match(meta("oifname"), "veth*", "!=")]),
        ("meta l4proto { tcp, 17 }", [match(meta("l4proto"), {"set": ["tcp", 17]})]),
        ("tcp dport 8000-8080 udp sport != 53",
         [match(port("tcp", "dport"), {"range": [8000, 8080]}), match(port("udp", "sport"), 53, "!=")]),
        ("iifname eth0 ip saddr 10.0.0.0/8", [match(meta("iifname"), "eth0"), match(saddr(), prefix("10.0.0.0", 8))]),
    ],
)
def test_supported_matches_become_json_match_expressions(text, matches):
    assert parse(text) == matches


@pytest.mark.parametrize(
    "text, reason",
    [
        ("ip saddr not-an-address", "'not-an-address' is not an IPv4 address"),
        ("ip saddr fd00::1", "'fd00::1' is not an IPv4 address"),
        ("ip6 daddr 10.0.0.1", "'10.0.0.1' is not an IPv6 address"),
        ("ip saddr 10.0.0.1; add rule inet x y drop", "'10.0.0.1;' is not an IPv4 address"),
        ("ct state established", "unsupported match 'ct'"),
        ('iifname "eth0" counter', "unsupported match 'counter'"),
        ("tcp dport 70000", "'70000' is not a port"),
        ("ip saddr { 10.0.0.1", "malformed set"),
        ('iifname "a b"', "is not an interface name"),
        ('iifname "@eth0"', "a leading @ names a set"),  # libnftables JSON: a set reference
        ("oifname { eth0, @x }", "a leading @ names a set"),
        ('iifname "eth0', "unterminated quoted string"),
        ("ip saddr", "a match without a value"),
        ("meta l4proto gre", "'gre' is not a layer 4 protocol"),
    ],
)
def test_anything_else_is_refused(text, reason):
    with pytest.raises(Refused, match=reason):
        parse(text)


def test_refusal_names_the_key_with_code_999():
    with pytest.raises(CniError) as info:
        load(conf(conditionsV6=["ip6 saddr fd00::/8", "jump", "elsewhere"]))
    err = info.value
    assert err.code == Code.INTERNAL
    assert err.msg == (
        "failed to parse config: conditionsV6 is not a single nftables match expression: "
        "'ip6 saddr fd00::/8 jump elsewhere'"
    )
    assert "unsupported match 'jump'" in err.details


def test_config_keeps_the_parsed_matches():
    cfg = load(conf(conditionsV4=["ip", "saddr", "{10.0.0.1,10.0.0.2}"], conditionsV6=[]))
    assert cfg.conditions(4) == [match(saddr(), {"set": ["10.0.0.1", "10.0.0.2"]})]
    assert cfg.conditions(6) == []
    assert hash(cfg) == hash(load(conf(conditionsV4=["ip saddr { 10.0.0.1, 10.0.0.2 }"])))  # still a frozen record
    assert cfg.conditions(4) is not cfg.conditions(4)  # fresh objects: a caller's edit changes no config
