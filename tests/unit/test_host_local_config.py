"""host-local config parsing: defaults, ordering of range sets and requested IPs, every error text."""

from __future__ import annotations

import ipaddress

import pytest

from cnichain.common.errors import CniError
from cnichain.plugins.host_local.config import DEFAULT_DATA_DIR, load


def net(ipam: dict, **top) -> dict:
    conf = {"cniVersion": "1.0.0", "name": "net1", "ipam": {"type": "host-local", **ipam}}
    conf.update(top)
    return conf


def ip(text: str):
    return ipaddress.ip_address(text)


def test_legacy_range_defaults():
    cfg = load(net({"subnet": "10.1.2.0/24"}))
    (rs,) = cfg.ranges
    (r,) = rs.ranges
    assert (r.start, r.end, r.gateway) == (ip("10.1.2.1"), ip("10.1.2.254"), ip("10.1.2.1"))
    assert cfg.data_dir == DEFAULT_DATA_DIR
    assert cfg.name == "net1" and cfg.requested_ips == () and cfg.routes == ()


def test_ipv6_default_end_is_all_ones():
    cfg = load(net({"ranges": [[{"subnet": "fd00::/120"}]]}))
    r = cfg.ranges[0].ranges[0]
    assert (str(r.start), str(r.end), str(r.gateway)) == ("fd00::1", "fd00::ff", "fd00::1")


def test_explicit_bounds_gateway_and_str():
    cfg = load(
        net({"ranges": [[{"subnet": "10.0.0.0/24", "rangeStart": "10.0.0.10", "rangeEnd": "10.0.0.20", "gateway": "10.0.0.254"}]]})
    )
    r = cfg.ranges[0].ranges[0]
    assert str(r) == "10.0.0.10-10.0.0.20" and str(r.gateway) == "10.0.0.254"


def test_order_runtime_ranges_then_legacy_then_ranges():
    cfg = load(
        net(
            {"subnet": "10.1.0.0/24", "ranges": [[{"subnet": "10.2.0.0/24"}]]},
            runtimeConfig={"ipRanges": [[{"subnet": "10.3.0.0/24"}]]},
        )
    )
    assert [str(rs.ranges[0].subnet) for rs in cfg.ranges] == ["10.3.0.0/24", "10.1.0.0/24", "10.2.0.0/24"]


def test_requested_ips_order_cni_args_args_runtime():
    cfg = load(
        net(
            {"ranges": [[{"subnet": "10.0.0.0/24"}], [{"subnet": "fd00::/64"}]]},
            args={"cni": {"ips": ["10.0.0.7/24"]}},
            runtimeConfig={"ips": ["fd00::9"]},
        ),
        "IgnoreUnknown=1;K8S_POD_NAME=x;IP=10.0.0.5",
    )
    assert cfg.requested_ips == (ip("10.0.0.5"), ip("10.0.0.7"), ip("fd00::9"))


def test_keys_match_case_insensitively_like_go():
    cfg = load(net({"Ranges": [[{"Subnet": "10.0.0.0/24", "RANGESTART": "10.0.0.5"}]], "DataDir": "/tmp/x"}))
    assert str(cfg.ranges[0].ranges[0].start) == "10.0.0.5" and cfg.data_dir == "/tmp/x"


def test_ipv4_mapped_addresses_are_ipv4():
    cfg = load(net({"subnet": "10.0.0.0/24"}, runtimeConfig={"ips": ["::ffff:10.0.0.9"]}))
    assert cfg.requested_ips == (ip("10.0.0.9"),)


def test_routes_and_resolvconf():
    cfg = load(
        net({"subnet": "10.0.0.0/24", "resolvConf": "/etc/r", "routes": [{"dst": "0.0.0.0/0"}, {"dst": "fd00::5/64", "gw": "fd00::1", "mtu": 1400}]})
    )
    assert [(r.dst, r.gw, r.mtu) for r in cfg.routes] == [("0.0.0.0/0", "", None), ("fd00::5/64", "fd00::1", 1400)]
    assert cfg.resolv_conf == "/etc/r"


def test_gateway_outside_subnet_is_accepted_like_v111():
    cfg = load(net({"subnet": "10.0.0.0/24", "gateway": "10.9.0.1"}))
    assert str(cfg.ranges[0].ranges[0].gateway) == "10.9.0.1"


def test_more_than_one_address_per_family_ok_from_030():
    conf = net({"ranges": [[{"subnet": "10.0.0.0/24"}], [{"subnet": "10.1.0.0/24"}]]})
    conf["cniVersion"] = "0.3.0"
    assert len(load(conf).ranges) == 2


RANGES = "ranges"
ERRORS = [
    ({"cniVersion": "1.0.0", "name": "n"}, "", "IPAM config missing 'ipam' key"),
    (net({}), "", "no IP ranges specified"),
    (net({"subnet": "foo"}), "", "invalid CIDR address: foo"),
    (net({"subnet": "10.0.0.0"}), "", "invalid CIDR address: 10.0.0.0"),
    (net({"subnet": "10.0.0.0/24", "gateway": "bar"}), "", "invalid IP address: bar"),
    (net({"subnet": "10.0.0.0/24", "rangeStart": "fe80::1%eth0"}), "", "invalid IP address: fe80::1%eth0"),
    (net({"subnet": "10.0.0.5/24"}), "", "invalid range set 0: Network has host bits set. For a subnet mask of length 24 the network address is 10.0.0.0"),
    (net({RANGES: [[{"subnet": "10.0.0.0/31"}]]}), "", "invalid range set 0: Network 10.0.0.0/31 too small to allocate from"),
    (net({RANGES: [[{"subnet": "10.0.0.0/32"}]]}), "", "invalid range set 0: Network 10.0.0.0/32 too small to allocate from"),
    (net({RANGES: [[{"subnet": "fd00::/127"}]]}), "", "invalid range set 0: Network fd00::/127 too small to allocate from"),
    (net({RANGES: [[{"subnet": "::ffff:10.0.0.0/120"}]]}), "", "invalid range set 0: IPNet IP and Mask version mismatch"),
    (net({RANGES: [[{"subnet": "10.0.0.0/24", "rangeStart": "10.0.1.1"}]]}), "", "invalid range set 0: RangeStart 10.0.1.1 not in network 10.0.0.0/24"),
    (net({RANGES: [[{"subnet": "10.0.0.0/24", "rangeStart": "fd00::1"}]]}), "", "invalid range set 0: RangeStart fd00::1 not in network 10.0.0.0/24"),
    (net({RANGES: [[{"subnet": "10.0.0.0/24", "rangeEnd": "10.0.1.1"}]]}), "", "invalid range set 0: RangeEnd 10.0.1.1 not in network 10.0.0.0/24"),
    (net({RANGES: [[{"subnet": "10.0.0.0/24", "rangeStart": "10.0.0.50", "rangeEnd": "10.0.0.40"}]]}), "", "invalid range set 0: RangeStart 10.0.0.50 not in network 10.0.0.0/24"),
    (net({RANGES: [[]]}), "", "invalid range set 0: empty range set"),
    (net({RANGES: [[{"subnet": "10.0.0.0/24"}, {"subnet": "fd00::/64"}]]}), "", "invalid range set 0: mixed address families"),
    (net({RANGES: [[{"subnet": "10.0.0.0/24"}, {"subnet": "10.0.0.0/25"}]]}), "", "invalid range set 0: subnets 10.0.0.1-10.0.0.254 and 10.0.0.1-10.0.0.126 overlap"),
    (net({RANGES: [[{"rangeStart": "10.0.0.1"}]]}), "", "invalid range set 0: IP <nil> not v4 nor v6"),
    (net({"subnet": "10.9.0.0/24", RANGES: [[{"subnet": "10.0.0.0/24"}], [{"subnet": "10.0.0.0/16"}]]}), "", "range set 1 overlaps with 2"),
    ({**net({RANGES: [[{"subnet": "10.0.0.0/24"}], [{"subnet": "10.1.0.0/24"}]]}), "cniVersion": "0.2.0"}, "", "CNI version 0.2.0 does not support more than 1 address per family"),
    (net({"subnet": "10.0.0.0/24"}), "IP=zz", 'ARGS: error parsing value of pair "IP=zz": invalid IP address zz'),
    (net({"subnet": "10.0.0.0/24"}), "FOO=1", 'ARGS: unknown args ["FOO=1"]'),
    (net({"subnet": "10.0.0.0/24"}), "IP", 'ARGS: invalid pair "IP"'),
    (net({"subnet": "10.0.0.0/24"}, args={"cni": {"ips": ["zz"]}}), "", "invalid IP address zz"),
    (net({"subnet": "10.0.0.0/24"}, runtimeConfig={"ips": ["10.0.0.1/99"]}), "", "invalid IP address 10.0.0.1/99"),
    (net({"subnet": "10.0.0.0/24", "routes": [{"dst": "x"}]}), "", "invalid CIDR address: x"),
    (net({"subnet": "10.0.0.0/24", "routes": [{"dst": "0.0.0.0/0", "gw": "y"}]}), "", "invalid IP address: y"),
    ({"cniVersion": "1.0.0", "name": "n", "ipam": "x"}, "", "json: cannot unmarshal string into Go struct field Net.ipam of type allocator.IPAMConfig"),
    (net({RANGES: "x"}), "", "json: cannot unmarshal string into Go struct field IPAMConfig.ipam.ranges of type []allocator.RangeSet"),
    (net({"subnet": "10.0.0.0/24", "dataDir": 5}), "", "json: cannot unmarshal number into Go struct field IPAMConfig.ipam.dataDir of type string"),
]


@pytest.mark.parametrize("conf,cni_args,message", ERRORS, ids=[e[2][:60] for e in ERRORS])
def test_error_messages(conf, cni_args, message):
    with pytest.raises(CniError) as info:
        load(conf, cni_args)
    assert info.value.msg == message
    assert info.value.code == 999


def test_route_without_dst_fails_add_only():
    conf = net({"type": "host-local", "subnet": "10.0.0.0/24", "routes": [{"gw": "10.0.0.1"}, {"dst": "0.0.0.0/0"}]})
    with pytest.raises(CniError) as info:
        load(conf)
    assert 'route is missing "dst"' in info.value.msg
    assert [r.dst for r in load(conf, strict=False).routes] == ["0.0.0.0/0"]  # DEL, CHECK, GC, STATUS
