"""Round-robin allocation against an in-memory store: order, wrap, gateways, requests, exhaustion."""

from __future__ import annotations

import ipaddress
from typing import Optional

import pytest

from cnichain.common.errors import CniError
from cnichain.plugins.host_local.plan import allocate, iterate
from cnichain.plugins.host_local.config import load


class FakeStore:
    """The Store protocol over a dict {ip text: (cid, ifname)}."""

    def __init__(self) -> None:
        self.held: dict[str, tuple[str, str]] = {}
        self.last: dict[str, str] = {}

    def reserve(self, cid, ifname, ip, range_id) -> bool:
        if str(ip) in self.held:
            return False
        self.held[str(ip)] = (cid, ifname)
        self.last[range_id] = str(ip)
        return True

    def last_reserved_ip(self, range_id) -> Optional[object]:
        v = self.last.get(range_id)
        return ipaddress.ip_address(v) if v else None

    def get_by_id(self, cid, ifname):
        return [ipaddress.ip_address(k) for k, v in self.held.items() if v == (cid, ifname)]

    def release_ip(self, ip, cid, ifname) -> None:
        if self.held.get(str(ip)) == (cid, ifname):
            del self.held[str(ip)]

    def release(self, cid, ifname) -> None:
        for k in [k for k, v in self.held.items() if v == (cid, ifname)]:
            del self.held[k]


def cfg(ranges, version="1.0.0"):
    return load({"cniVersion": version, "name": "n", "ipam": {"ranges": ranges}})


def addrs(allocs):
    return [a.cidr for a in allocs]


def test_first_allocation_skips_gateway_and_counts_up():
    store, c = FakeStore(), cfg([[{"subnet": "10.0.0.0/29"}]])
    got = [addrs(allocate(store, c, f"c{i}", "eth0"))[0] for i in range(5)]
    assert got == ["10.0.0.2/29", "10.0.0.3/29", "10.0.0.4/29", "10.0.0.5/29", "10.0.0.6/29"]
    with pytest.raises(CniError) as info:
        allocate(store, c, "c9", "eth0")
    assert info.value.msg == "failed to allocate for range 0: no IP addresses available in range set: 10.0.0.1-10.0.0.6"
    assert info.value.code == 999


def test_round_robin_does_not_reuse_a_just_released_address():
    store, c = FakeStore(), cfg([[{"subnet": "10.0.0.0/29"}]])
    allocate(store, c, "a", "eth0")  # .2
    store.release("a", "eth0")
    assert addrs(allocate(store, c, "b", "eth0")) == ["10.0.0.3/29"]


def test_wraps_to_range_start_after_the_end():
    store, c = FakeStore(), cfg([[{"subnet": "10.0.0.0/29"}]])
    store.last["0"] = "10.0.0.6"
    assert addrs(allocate(store, c, "a", "eth0")) == ["10.0.0.2/29"]


def test_wraps_across_ranges_of_a_set():
    c = cfg([[{"subnet": "10.0.0.0/30"}, {"subnet": "10.0.1.0/30"}]])
    order = [str(ip) for ip, _ in iterate(c.ranges[0], ipaddress.ip_address("10.0.0.2"))]
    # next range first (its .1 is the gateway), then around to the last reserved address itself
    assert order == ["10.0.1.2", "10.0.0.2"]
    order = [str(ip) for ip, _ in iterate(c.ranges[0], None)]
    assert order == ["10.0.0.2", "10.0.1.2"]


def test_last_reserved_outside_set_restarts_at_first_range():
    store, c = FakeStore(), cfg([[{"subnet": "10.0.0.0/24", "rangeStart": "10.0.0.100"}]])
    store.last["0"] = "192.168.0.9"
    assert addrs(allocate(store, c, "a", "eth0")) == ["10.0.0.100/24"]


def test_explicit_gateway_inside_range_is_skipped():
    c = cfg([[{"subnet": "10.0.0.0/29", "gateway": "10.0.0.3"}]])
    assert [str(i) for i, _ in iterate(c.ranges[0], None)] == ["10.0.0.1", "10.0.0.2", "10.0.0.4", "10.0.0.5", "10.0.0.6"]


def test_result_carries_prefix_and_gateway():
    store, c = FakeStore(), cfg([[{"subnet": "10.0.0.0/24", "gateway": "10.0.0.254"}]])
    (a,) = allocate(store, c, "a", "eth0")
    assert (a.cidr, a.gateway) == ("10.0.0.1/24", "10.0.0.254")


def test_dual_stack_one_address_per_range_set():
    store, c = FakeStore(), cfg([[{"subnet": "10.0.0.0/24"}], [{"subnet": "fd00::/64"}]])
    allocs = allocate(store, c, "a", "eth0")
    assert addrs(allocs) == ["10.0.0.2/24", "fd00::2/64"]
    assert store.last == {"0": "10.0.0.2", "1": "fd00::2"}


def test_duplicate_allocation_refused():
    store, c = FakeStore(), cfg([[{"subnet": "10.0.0.0/24"}]])
    allocate(store, c, "a", "eth0")
    with pytest.raises(CniError) as info:
        allocate(store, c, "a", "eth0")
    assert info.value.msg == "failed to allocate for range 0: 10.0.0.2 has been allocated to a, duplicate allocation is not allowed"
    assert info.value.code == 999
    # another interface of the same container is a different attachment
    assert addrs(allocate(store, c, "a", "net1")) == ["10.0.0.3/24"]


def requested(ranges, *ips, version="1.0.0"):
    conf = {"cniVersion": version, "name": "n", "ipam": {"ranges": ranges}, "runtimeConfig": {"ips": list(ips)}}
    return load(conf)


def test_requested_ip_is_used_and_becomes_last_reserved():
    store, c = FakeStore(), requested([[{"subnet": "10.0.0.0/24"}]], "10.0.0.50/24")
    assert addrs(allocate(store, c, "a", "eth0")) == ["10.0.0.50/24"]
    assert store.last["0"] == "10.0.0.50"


def test_requested_ips_matched_to_their_range_set():
    store = FakeStore()
    c = requested([[{"subnet": "10.0.0.0/24"}], [{"subnet": "fd00::/64"}]], "fd00::77", "10.0.0.9")
    assert addrs(allocate(store, c, "a", "eth0")) == ["10.0.0.9/24", "fd00::77/64"]


@pytest.mark.parametrize(
    "ip,message",
    [
        ("10.0.0.1", "failed to allocate for range 0: requested ip 10.0.0.1 is subnet's gateway"),
        ("10.5.0.1", "failed to allocate all requested IPs: 10.5.0.1"),
    ],
)
def test_requested_ip_errors(ip, message):
    store = FakeStore()
    with pytest.raises(CniError) as info:
        allocate(store, requested([[{"subnet": "10.0.0.0/24"}]], ip), "a", "eth0")
    assert info.value.msg == message
    assert info.value.code == 999
    assert store.held == {}  # all-or-nothing


def test_requested_ip_taken():
    store = FakeStore()
    c = requested([[{"subnet": "10.0.0.0/24"}]], "10.0.0.9")
    allocate(store, c, "a", "eth0")
    with pytest.raises(CniError) as info:
        allocate(store, c, "b", "eth0")
    assert info.value.msg == (
        "failed to allocate for range 0: requested IP address 10.0.0.9 is not available in range set 10.0.0.1-10.0.0.254"
    )
    assert info.value.code == 999


def test_failure_in_second_set_rolls_back_only_this_calls_addresses():
    store = FakeStore()
    c = cfg([[{"subnet": "10.0.0.0/24"}], [{"subnet": "10.1.0.0/30"}]])
    allocate(store, c, "x", "eth0")  # takes 10.1.0.2, the only address of set 1
    with pytest.raises(CniError) as info:
        allocate(store, c, "y", "eth0")
    assert info.value.msg == "failed to allocate for range 1: no IP addresses available in range set: 10.1.0.1-10.1.0.2"
    assert info.value.code == 999
    assert set(store.held) == {"10.0.0.2", "10.1.0.2"}


def test_exhaustion_with_gateway_only_range_terminates():
    c = cfg([[{"subnet": "10.0.0.0/24", "rangeStart": "10.0.0.1", "rangeEnd": "10.0.0.1"}]])
    assert list(iterate(c.ranges[0], None)) == []
    assert list(iterate(c.ranges[0], ipaddress.ip_address("10.0.0.1"))) == []
