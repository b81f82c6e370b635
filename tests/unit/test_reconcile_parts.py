"""The reconciler's pure parts: netlink headers, the repair back-off, the CRI answer, settings, metrics."""

from __future__ import annotations

import struct

import pytest

from cnichain.agent.reconcile import netlink_events as ev
from cnichain.agent.reconcile import settings, status
from cnichain.agent.reconcile.backoff import Backoff
from cnichain.podstate import cri


def _msg(msg_type: int, payload: bytes = b"\0" * 4) -> bytes:
    return struct.pack("=IHHII", 16 + len(payload), msg_type, 0, 0, 0) + payload


class _Sub(ev.Subscription):
    def __init__(self, protocol: int, kind: str) -> None:  # no socket: only the parser
        self.protocol, self.kind = protocol, kind


def test_only_deletions_wake_the_reconciler():
    nft = _Sub(ev.NETLINK_NETFILTER, ev.NFT)
    new_rule, del_table, del_elem = (10 << 8) | 6, (10 << 8) | 2, (10 << 8) | 14
    assert not nft.relevant(_msg(new_rule))
    assert nft.relevant(_msg(new_rule) + _msg(del_table))
    assert nft.relevant(_msg(del_elem))
    assert not nft.relevant(_msg((11 << 8) | 2))  # another nfnetlink subsystem
    rt = _Sub(ev.NETLINK_ROUTE, ev.TC)
    assert rt.relevant(_msg(37)) and rt.relevant(_msg(17)) and not rt.relevant(_msg(36))  # DELQDISC, DELLINK, NEWQDISC
    assert not rt.relevant(b"\x03\0\0\0")  # truncated: ignored, never a crash


def test_backoff_backs_off_then_forgives_a_quiet_window():
    b = Backoff(limit=3, window=10.0)
    assert not b.spend("k", 0.0) and not b.spend("k", 1.0)
    assert b.spend("k", 2.0) and b.blocked("k", 5.0) and not b.blocked("k", 12.5)
    assert not b.spend("k", 13.0) and not b.spend("k", 14.0)
    assert b.spend("k", 15.0) and b.until["k"] == 35.0  # the second back-off doubles
    assert not b.spend("k", 60.0) and "k" not in b.strikes  # a quiet window: forgiven
    assert not b.blocked("other", 0.0)


def _field(number: int, data: bytes) -> bytes:
    return bytes([number << 3 | 2, len(data)]) + data


def test_list_pod_sandbox_response_is_read_by_hand():
    meta = _field(1, b"pod-a") + _field(3, b"default")
    sandbox = _field(1, b"abc123") + _field(2, meta) + bytes([3 << 3 | 0, 1])  # state NOTREADY
    answer = _field(1, sandbox) + _field(1, _field(1, b"def456"))
    assert cri.parse_list_pod_sandbox_response(answer) == [
        cri.Sandbox("abc123", cri.SANDBOX_NOTREADY), cri.Sandbox("def456", cri.SANDBOX_READY)]
    assert cri.parse_list_pod_sandbox_response(b"") == []
    with pytest.raises(cri.CriError):
        cri.parse_list_pod_sandbox_response(b"\x0a\x10abc")  # a length past the end


def test_settings_round_trip_and_refusals():
    cfg = settings.ReconcileConfig(mode="dry-run", grace=5.0, networks=["a", "b"], runtime_endpoint="/run/c.sock",
                                   cache_dirs=["/c"], bin_dirs=["/b"], status_file="/s.json")
    back = settings.parse(settings.to_argv(cfg))
    assert (back.mode, back.grace, back.networks, back.runtime_endpoint, back.cache_dirs, back.bin_dirs,
            back.status_file) == ("dry-run", 5.0, ["a", "b"], "/run/c.sock", ["/c"], ["/b"], "/s.json")
    for bad in (dict(grace=-1.0), dict(networks=["bad name"]), dict(cache_dirs=["relative"]), dict(mode="maybe")):
        with pytest.raises(ValueError):
            settings.ReconcileConfig(**bad).validate()  # type: ignore[arg-type]
    assert settings.status_path("/run/x.sock") == "/run/x.sock.reconcile.json"


def test_metrics_of_a_view():
    c = status.Counters(sweeps=2, leaks_found=1, last_sweep=1700000000.5, sweep_seconds=0.25)
    c.repaired("portmap", "ok")
    text = "\n".join(status.metric_lines({"counters": status.as_dict(c)}, running=True))
    assert 'cnichain_agent_reconcile_repairs_total{plugin="portmap",outcome="ok"} 1' in text
    assert "cnichain_agent_reconcile_sweeps_total 2" in text and "cnichain_agent_reconciler_up 1" in text
    assert "cnichain_agent_reconcile_last_sweep_timestamp_seconds 1700000000.500" in text
    assert "cnichain_agent_reconciler_up 0" in "\n".join(status.metric_lines(None, running=False))


def test_free_addresses_per_range_set_are_gauges():
    doc = {"counters": {}, "pools": [{"network": "net1", "range_set": "10.1.0.2-10.1.0.254", "capacity": 252,
                                      "reserved": 2, "free": 250}]}
    text = "\n".join(status.metric_lines(doc, running=True))
    assert "# TYPE cnichain_agent_ipam_free_addresses gauge" in text
    assert 'cnichain_agent_ipam_free_addresses{network="net1",range_set="10.1.0.2-10.1.0.254"} 250' in text
    assert 'cnichain_agent_ipam_capacity_addresses{network="net1",range_set="10.1.0.2-10.1.0.254"} 252' in text
    assert "addresses net1 10.1.0.2-10.1.0.254: 250 free of 252" in status.render_text(doc)
