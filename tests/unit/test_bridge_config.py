"""bridge config parsing: defaults, every reference error message, MAC sources, the corpus."""

from __future__ import annotations

import json
import os

import pytest

from cnichain.common.errors import CniError
from cnichain.plugins.bridge.config import add_refusals, load

CORPUS = os.path.join(os.path.dirname(__file__), "..", "data", "corpus")


def conf(**keys):
    base = {"cniVersion": "1.0.0", "name": "net", "type": "bridge"}
    base.update(keys)
    return base


def test_defaults():
    cfg = load(conf())
    assert cfg.bridge == "cni0" and not cfg.is_gateway and not cfg.ip_masq and cfg.mtu == 0
    assert not cfg.is_layer3 and cfg.mac == "" and cfg.vlan == 0


def test_default_gateway_implies_gateway_and_unknown_keys_are_ignored():
    cfg = load(conf(isDefaultGateway=True, addIf="true", somethingNew={"x": 1}))
    assert cfg.is_gateway and cfg.is_default_gateway


@pytest.mark.parametrize(
    "keys,message",
    [
        ({"isGateway": "true"}, "failed to load netconf: json: cannot unmarshal string into Go struct field NetConf.isGateway of type bool"),
        ({"mtu": "1500"}, "failed to load netconf: json: cannot unmarshal string into Go struct field NetConf.mtu of type int"),
        ({"mtu": 1.5}, "failed to load netconf: json: cannot unmarshal number 1.5 into Go struct field NetConf.mtu of type int"),
        ({"bridge": 5}, "failed to load netconf: json: cannot unmarshal number into Go struct field NetConf.bridge of type string"),
        ({"bridge": "a/b"}, "failed to load netconf: invalid bridge name 'a/b'"),
        ({"bridge": "x" * 16}, "invalid bridge name"),
        ({"vlan": 4095}, "invalid VLAN ID 4095 (must be between 0 and 4094)"),
        ({"vlan": -1}, "invalid VLAN ID -1 (must be between 0 and 4094)"),
        ({"disableContainerInterface": True, "ipam": {"type": "host-local"}}, "cannot use IPAM when DisableContainerInterface flag is set"),
        ({"vlanTrunk": [{"id": 5000}]}, "incorrect trunk id parameter"),
        ({"vlanTrunk": [{"minID": 0, "maxID": 4}]}, "incorrect trunk minID parameter"),
        ({"vlanTrunk": [{"minID": 1, "maxID": 4095}]}, "incorrect trunk maxID parameter"),
        ({"vlanTrunk": [{"minID": 9, "maxID": 4}]}, "minID is greater than maxID in trunk parameter"),
        ({"vlanTrunk": [{"minID": 9}]}, "minID and maxID should be configured simultaneously, maxID is missing"),
        ({"vlanTrunk": [{"maxID": 9}]}, "minID and maxID should be configured simultaneously, minID is missing"),
        ({"runtimeConfig": {"mac": "zz:11:22:33:44:55"}}, 'invalid MAC address "zz:11:22:33:44:55"'),
    ],
)
def test_errors(keys, message):
    with pytest.raises(CniError) as info:
        load(conf(**keys))
    assert message in info.value.msg
    assert info.value.code == 999


def test_trunk_ranges():
    cfg = load(conf(vlanTrunk=[{"id": 7}, {"minID": 10, "maxID": 12}]))
    assert cfg.vlan_trunk == (7, 10, 11, 12) and cfg.needs_vlan_filtering


def test_mac_precedence():
    # CNI_ARGS < args.cni.mac < runtimeConfig.mac
    assert load(conf(), "IgnoreUnknown=1;MAC=02:00:00:00:00:01").mac == "02:00:00:00:00:01"
    c = conf(args={"cni": {"mac": "02:00:00:00:00:02"}})
    assert load(c, "MAC=02:00:00:00:00:01").mac == "02:00:00:00:00:02"
    c["runtimeConfig"] = {"mac": "02-00-00-00-00-0A"}
    assert load(c, "MAC=02:00:00:00:00:01").mac == "02:00:00:00:00:0a"


def test_cni_args_unknown_keys_need_ignore_unknown():
    with pytest.raises(CniError, match=r'ARGS: unknown args \["K8S_POD_NAME=x"\]') as info:
        load(conf(), "K8S_POD_NAME=x")
    assert info.value.code == 999
    assert load(conf(), "IgnoreUnknown=1;K8S_POD_NAME=x").mac == ""


def test_del_ignores_bad_mac():
    assert load(conf(runtimeConfig={"mac": "bogus"}), with_mac=False).mac == ""


@pytest.mark.parametrize(
    "name",
    ["containerd-install-cni.conflist", "kubernetes-local-up-cluster.conflist",
     "minikube-bridge.conflist", "podman-87-podman-bridge.conflist"],
)
def test_corpus_bridge_entries_parse(name):
    with open(os.path.join(CORPUS, name)) as fh:
        data = json.load(fh)
    entry = next(p for p in data["plugins"] if p["type"] == "bridge")
    cfg = load(dict(entry, name=data["name"], cniVersion=data["cniVersion"]))
    assert cfg.is_layer3 and cfg.is_gateway and cfg.ip_masq


def test_shipped_conflist_parses():
    here = os.path.join(os.path.dirname(__file__), "..", "..", "conflists", "bridge-host-local.conflist")
    with open(here) as fh:
        data = json.load(fh)
    assert data["cniVersion"] == "1.0.0"
    entry = data["plugins"][0]
    cfg = load(dict(entry, name=data["name"], cniVersion=data["cniVersion"]))
    assert cfg.ipam_type == "host-local"


@pytest.mark.parametrize(
    "keys,message",
    [
        ({"hairpinMode": True, "promiscMode": True}, "cannot set hairpin mode and promiscuous mode at the same time"),
        ({"ipMasq": True, "ipam": {"type": "host-local"}, "ipMasqBackend": "pf"}, 'unknown ipmasq backend "pf"'),
        ({"bridge": "longbridge01", "vlan": 1000, "isGateway": True}, "invalid vlan gateway name"),
    ],
)
def test_refused_at_add_only(keys, message):
    """The reference refuses these in cmdAdd only: every other command loads them."""
    cfg = load(conf(**keys))
    with pytest.raises(CniError) as info:
        add_refusals(cfg)
    assert message in info.value.msg


@pytest.mark.parametrize("backend", ["iptables", "nftables", ""])
def test_ip_masq_backend_both_values(backend):
    cfg = load(conf(ipMasq=True, ipMasqBackend=backend, ipam={"type": "host-local"}))
    add_refusals(cfg)
    assert cfg.ip_masq_backend == backend


def test_vlan_with_is_gateway_names_the_gateway_device():
    cfg = load(conf(bridge="br0", vlan=100, isGateway=True))
    add_refusals(cfg)
    assert cfg.vlan_gateway == "br0.100"
    assert load(conf(bridge="br0", vlan=100)).vlan_gateway == ""
    assert load(conf(bridge="br0", isGateway=True)).vlan_gateway == ""
