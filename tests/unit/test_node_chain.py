"""Chaining into another network's conflist (node/chain.py), against real conflists from the corpus."""

from __future__ import annotations

import json
import os

import pytest

from cnichain.node import chain

CORPUS = os.path.join(os.path.dirname(__file__), "..", "data", "corpus")


def load(name: str) -> dict:
    with open(os.path.join(CORPUS, name), "rb") as fh:
        return chain.load_primary(name, fh.read())


def types(conf: dict) -> list[str]:
    return [p["type"] for p in conf["plugins"]]


def test_calico_portmap_is_replaced_in_place_and_bandwidth_follows():
    primary = load("calico-k8s-pod-network.conflist")
    ours = chain.derive(primary)
    assert types(ours) == ["calico", "cnichain-portmap", "cnichain-bandwidth"]
    assert ours["plugins"][1] == dict(primary["plugins"][1], type="cnichain-portmap")  # snat + capabilities kept
    assert ours["name"] == primary["name"] and ours["cniVersion"] == primary["cniVersion"]
    assert ours["plugins"][0] == primary["plugins"][0]


def test_antrea_keeps_order_and_capabilities():
    ours = chain.derive(load("antrea-cni.conflist"))
    assert types(ours) == ["antrea", "cnichain-portmap", "cnichain-bandwidth"]
    assert ours["plugins"][2]["capabilities"] == {"bandwidth": True, "io.kubernetes.cri.pod-annotations": True}


def test_flannel_and_a_single_plugin_conf():
    assert types(chain.derive(load("flannel-kube-flannel.conflist"))) == ["flannel", "cnichain-portmap", "cnichain-bandwidth"]
    single = chain.load_primary("10-x.conf", json.dumps({"cniVersion": "0.4.0", "name": "x", "type": "ptp",
                                                          "ipam": {"type": "host-local"}}).encode())
    ours = chain.derive(single)
    assert ours["name"] == "x" and ours["cniVersion"] == "0.4.0"
    assert types(ours) == ["ptp", "cnichain-portmap", "cnichain-bandwidth"]
    assert "name" not in ours["plugins"][0]


def test_every_corpus_conflist_derives_without_losing_plugins():
    for name in sorted(os.listdir(CORPUS)):
        if not name.endswith((".conflist", ".conf")):
            continue
        primary = load(name)
        ours = chain.derive(primary)
        assert len(ours["plugins"]) >= len(primary["plugins"])
        for before, after in zip(primary["plugins"], ours["plugins"]):
            assert after["type"] in (before["type"], "cnichain-" + before["type"])
            assert {k: v for k, v in after.items() if k not in ("type", "capabilities")} == \
                {k: v for k, v in before.items() if k not in ("type", "capabilities")}
            caps = before.get("capabilities")
            if isinstance(caps, dict):  # kept, plus the companions of what it asks for
                assert after["capabilities"].items() >= caps.items()
                extra = set(after["capabilities"]) - set(caps)
                assert extra <= set(chain.COMPANION_CAPABILITIES.get(before["type"], ())[1:])
        assert not any(t in chain.REPLACED for t in types(ours))


def test_a_replaced_bandwidth_that_takes_the_kubelets_rate_also_takes_the_pods_annotations():
    primary = load("k3s-flannel.conflist")
    bandwidth = next(p for p in chain.derive(primary)["plugins"] if p["type"] == "cnichain-bandwidth")
    assert bandwidth["capabilities"] == {"bandwidth": True, "io.kubernetes.cri.pod-annotations": True}
    static = {"cniVersion": "1.0.0", "name": "n", "plugins": [
        {"type": "bridge"}, {"type": "bandwidth", "ingressRate": 1000, "ingressBurst": 1000}]}
    assert "capabilities" not in chain.derive(static)["plugins"][1]  # a static shape asks for nothing


def test_our_conflists_and_the_registry_name_the_capability_bandwidth_reads():
    from cnichain.plugins import registry
    from cnichain.plugins.bandwidth import pod_qos

    bandwidth = next(t for t in registry.TYPES if t.name == "bandwidth")
    assert pod_qos.CAPABILITY in bandwidth.capabilities
    assert chain.COMPANION_CAPABILITIES["bandwidth"] == bandwidth.capabilities


def test_primary_is_the_lowest_sorted_config_that_is_not_ours():
    names = ["10-calico.conflist", "00-cnichain.conflist", ".05-x.conf.cnichain-tmp-1", "README", "99-z.json"]
    assert chain.find_primary(names, {"00-cnichain.conflist"}) == "10-calico.conflist"
    # libcni filters by suffix only: a hidden config is still a config, and sorts first
    assert chain.find_primary(names + [".00-a.conflist"], {"00-cnichain.conflist"}) == ".00-a.conflist"
    assert chain.find_primary(["00-cnichain.conflist"], {"00-cnichain.conflist"}) is None


def test_invalid_primary_is_reported_not_guessed():
    with pytest.raises(chain.ChainError):
        chain.load_primary("10-x.conflist", b'{"name": "x", "plugins": [')
    with pytest.raises(chain.ChainError):
        chain.load_primary("10-x.conflist", b'{"plugins": []}')


def test_our_name_must_sort_first():
    chain.check_sorts_first("00-cnichain.conflist", "05-antrea.conflist")
    with pytest.raises(chain.ChainError):
        chain.check_sorts_first("00-cnichain.conflist", "00-antrea.conflist")
