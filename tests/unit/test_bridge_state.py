"""What bridge's state.py (its reconciler face) reads back from a cached result for its nftables rules."""

from __future__ import annotations

import json

from cnichain.plugins.bridge import state as bridge_state
from cnichain.common.skel import build_request
from cnichain.plugins.bandwidth.config import ifb_name


def _req(macspoofchk: bool, ip_masq: bool = True):
    conf = {"cniVersion": "1.0.0", "name": "net1", "type": "bridge", "bridge": "br9", "isGateway": True,
            "ipMasq": ip_masq, "macspoofchk": macspoofchk, "ipam": {"type": "host-local", "subnet": "10.9.0.0/24"},
            "prevResult": {"cniVersion": "1.0.0", "interfaces": [
                {"name": "br9", "mac": "aa:aa:aa:aa:aa:01"},
                {"name": "veth0123abcd", "mac": "aa:aa:aa:aa:aa:01"},
                {"name": "eth0", "mac": "0A:58:0A:09:00:02", "sandbox": "/run/netns/p"},
                {"name": ifb_name("net1", "c1"), "mac": "aa:aa:aa:aa:aa:03"}],  # bandwidth's IFB comes after
                "ips": [{"address": "10.9.0.2/24", "interface": 2}]}}
    env = {"CNI_COMMAND": "CHECK", "CNI_CONTAINERID": "c1", "CNI_NETNS": "/run/netns/p", "CNI_IFNAME": "eth0",
           "CNI_PATH": "/opt/cni/bin"}
    return build_request("CHECK", env, json.dumps(conf).encode())


def test_the_spoof_check_guards_the_host_veth_and_the_pod_mac_of_the_result():
    assert bridge_state.wants(_req(True)) == (["10.9.0.2/24"], ("veth0123abcd", "0a:58:0a:09:00:02"))
    assert bridge_state.wants(_req(False)) == (["10.9.0.2/24"], None)
    assert bridge_state.applies(_req(True, ip_masq=False)) and not bridge_state.applies(_req(False, ip_masq=False))


def test_a_spoof_rule_is_read_back_as_its_veth_and_mac():
    from cnichain.plugins.bridge import rules

    rule = rules.spoof_rule("veth0123abcd", "0A:58:0A:09:00:02", "tag")["add"]["rule"]
    assert rules.spoof_guard(rule) == ("veth0123abcd", "0a:58:0a:09:00:02")
    assert rules.tag_of(rules.comment("net1", "c1", "eth0")) == rules.owner_tag("net1", "c1", "eth0")
    assert rules.tag_of("short") == ""
    req = _req(True)
    tag = rules.owner_tag("net1", "c1", "eth0")
    masq = {tag: {"10.9.0.2"}}
    assert bridge_state.missing(req, masq, {tag: {("veth0123abcd", "0a:58:0a:09:00:02")}}) is None
    assert bridge_state.missing(req, masq, {}) == "MAC spoof check of 0a:58:0a:09:00:02 on veth0123abcd missing"
    assert bridge_state.missing(req, {}, {}).startswith("masquerade rules missing for 10.9.0.2;")
