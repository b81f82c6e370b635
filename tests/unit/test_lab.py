"""tools/lab.py's pure helpers: the bounded rate retry and the veth pairs read from ``ip -j``."""

from __future__ import annotations

import json

from cnichain.tools.lab import _veth_pairs, rate_within


def test_rate_within_stops_at_the_first_rate_in_tolerance():
    rates = iter([11.9e6, 10.2e6, 10.0e6])
    assert rate_within(lambda: next(rates), 10e6) == (True, [11.9e6, 10.2e6])


def test_rate_within_fails_a_shaper_that_is_wrong_every_time():
    calls: list[int] = []

    def unshaped() -> float:
        calls.append(1)
        return 940e6

    ok, rates = rate_within(unshaped, 10e6, attempts=3)
    assert not ok and rates == [940e6] * 3 and len(calls) == 3


def test_rate_within_tolerance_is_relative_to_the_target():
    assert rate_within(lambda: 7.6e6, 10e6, 0.25)[0]
    assert not rate_within(lambda: 7.4e6, 10e6, 0.25, attempts=1)[0]


LINKS = [
    {"ifindex": 1, "ifname": "lo"},
    {"ifindex": 5, "ifname": "eth0", "link_index": 9, "link_netnsid": 0, "linkinfo": {"info_kind": "veth"}},
    {"ifindex": 6, "ifname": "v-local", "link_index": 7, "linkinfo": {"info_kind": "veth"}},
    {"ifindex": 8, "ifname": "mv0", "link_index": 2, "link_netnsid": 0, "linkinfo": {"info_kind": "macvlan"}},
]


def test_veth_pairs_are_veths_only():
    assert _veth_pairs(json.dumps(LINKS)) == {(5, 9), (6, 7)}


def test_veth_pairs_peer_elsewhere_keeps_those_with_a_peer_namespace():
    assert _veth_pairs(json.dumps(LINKS), peer_elsewhere=True) == {(5, 9)}


def test_veth_pairs_of_no_output_or_garbage_is_empty():
    assert _veth_pairs("") == set() and _veth_pairs("not json") == set()


def test_rate_within_allows_a_starved_flow_more_room_than_a_fast_one():
    # A loaded machine can only slow a flow: 14% under a 10% bound passes, 11% over never does.
    assert rate_within(lambda: 8.6e6, 10e6, 0.10, attempts=1)[0]
    assert not rate_within(lambda: 8.4e6, 10e6, 0.10, attempts=1)[0]
    assert not rate_within(lambda: 11.1e6, 10e6, 0.10, attempts=1)[0]
