"""Result conversion between every pair of supported versions."""

from __future__ import annotations

import pytest

from cnichain.common.errors import CniError
from cnichain.common.types import Result
from cnichain.common.version import ALL, at_least

FULL = {
    "cniVersion": "1.1.0",
    "interfaces": [
        {"name": "cni0", "mac": "00:11:22:33:44:55"},
        {"name": "veth1234abcd", "mac": "00:11:22:33:44:66"},
        {"name": "eth0", "mac": "00:11:22:33:44:77", "mtu": 1400, "sandbox": "/var/run/netns/x"},
    ],
    "ips": [
        {"interface": 2, "address": "10.1.0.5/16", "gateway": "10.1.0.1"},
        {"interface": 2, "address": "10.1.0.6/16", "gateway": "10.1.0.1"},
        {"interface": 2, "address": "2001:db8::5/64", "gateway": "2001:db8::1"},
    ],
    "routes": [{"dst": "0.0.0.0/0"}, {"dst": "::/0", "gw": "2001:db8::1", "priority": 100}],
    "dns": {"nameservers": ["10.1.0.1"], "search": ["svc"]},
}


def test_040_has_versions_and_no_mtu():
    out = Result.from_dict(FULL).to_dict("0.4.0")
    assert [ip["version"] for ip in out["ips"]] == ["4", "4", "6"]
    assert "mtu" not in out["interfaces"][2]
    assert out["routes"][1]["priority"] == 100


def test_100_drops_ip_version_and_keeps_interface_index_zero():
    res = Result.from_dict({"cniVersion": "0.4.0", "ips": [{"version": "4", "interface": 0, "address": "10.0.0.2/24"}]})
    out = res.to_dict("1.0.0")
    assert out["ips"] == [{"interface": 0, "address": "10.0.0.2/24"}]
    assert "dns" not in out


def test_020_keeps_first_ip_per_family_and_routes_by_family():
    out = Result.from_dict(FULL).to_dict("0.2.0")
    assert out["ip4"] == {"ip": "10.1.0.5/16", "gateway": "10.1.0.1", "routes": [{"dst": "0.0.0.0/0"}]}
    assert out["ip6"]["ip"] == "2001:db8::5/64"
    assert out["ip6"]["routes"] == [{"dst": "::/0", "gw": "2001:db8::1"}]


def test_020_without_ips_cannot_convert():
    with pytest.raises(CniError, match="no valid IP addresses") as info:
        Result().to_dict("0.2.0")
    assert info.value.code == 1


def test_empty_dns_printed_before_100_only():
    res = Result(ips=[])
    assert res.to_dict("0.3.1")["dns"] == {}
    assert "dns" not in res.to_dict("1.1.0")


@pytest.mark.parametrize("src", ALL)
@pytest.mark.parametrize("dst", ALL)
def test_round_trip_every_pair(src, dst):
    base = Result.from_dict(FULL)
    if not at_least(src, "0.3.0"):
        base = Result.from_dict(base.to_dict("0.2.0"), "0.2.0")
    encoded = base.to_dict(src)
    decoded = Result.from_dict(encoded, src)
    again = decoded.to_dict(dst)
    assert again["cniVersion"] == dst
    addrs = [ip["address"] for ip in again.get("ips", [])] or [again[k]["ip"] for k in ("ip4", "ip6") if k in again]
    assert "10.1.0.5/16" in addrs and "2001:db8::5/64" in addrs
