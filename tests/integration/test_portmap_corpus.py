"""Every portmap entry of the real-world corpus (tests/data/corpus) works unchanged with ours.

The portmap entry is kept exactly as written.  Bridge primaries keep their keys (their IPAM
state is moved into the lab); other primaries (flannel, calico, ptp, ...) become a plain
bridge + host-local on 10.77.0.0/24, because only the portmap entry is what we claim to run.
Each case maps a TCP port and proves it from another namespace, from the node's localhost and,
where the bridge can hairpin, from the pod itself.
"""

from __future__ import annotations

import copy
import glob
import json
import os

import pytest

from cnichain.tools.lab import isolate_conflist
from cnichain.podstate.runtime import Attachment, ConfList
from tests.integration.portmap_traffic import CLIENT4, NODE4, fetch, pod_ips, serve, table

pytestmark = pytest.mark.integration

CORPUS = os.path.join(os.path.dirname(os.path.dirname(__file__)), "data", "corpus")


def _portmap_files() -> list[str]:
    out = []
    for path in sorted(glob.glob(os.path.join(CORPUS, "*.conf*"))):
        with open(path, encoding="utf-8") as fh:
            data = json.load(fh)
        if any(p.get("type") == "portmap" for p in data.get("plugins", [])):
            out.append(os.path.basename(path))
    return out


def _runnable(data: dict, workdir: str) -> tuple[dict, dict]:
    """(conflist to run, the untouched portmap entry)."""
    plugins = data["plugins"]
    portmap = next(p for p in plugins if p.get("type") == "portmap")
    primary = plugins[0]
    if primary.get("type") == "bridge":
        bridge = copy.deepcopy(primary)
        # the ranges as written, IPv4 only (the lab's client speaks both, the corpus differs)
    else:
        bridge = {"type": "bridge", "bridge": "cni0", "isGateway": True, "ipMasq": True,
                  "ipam": {"type": "host-local", "subnet": "10.77.0.0/24", "routes": [{"dst": "0.0.0.0/0"}]}}
    run = {"cniVersion": data.get("cniVersion", "0.3.1"), "name": data["name"], "plugins": [bridge, copy.deepcopy(portmap)]}
    return isolate_conflist(run, workdir), portmap


@pytest.mark.parametrize("filename", _portmap_files())
def test_corpus_portmap_entry(lab, make_runtime, plugin_dir, reference_dir, filename):
    with open(os.path.join(CORPUS, filename), encoding="utf-8") as fh:
        data = json.load(fh)
    run, entry = _runnable(data, lab.workdir)
    assert run["plugins"][1] == entry  # the portmap entry runs exactly as written
    client = lab.netns("client")
    lab.wire(client, [f"{CLIENT4}/24"], [f"{NODE4}/24"], "cli")
    runtime = make_runtime([plugin_dir, reference_dir])
    conf = ConfList.from_dict(run)
    pod = lab.netns("pod")
    att = Attachment("ctr-corpus", pod, "eth0", capability_args={"portMappings": [
        {"hostPort": 8080, "containerPort": 80, "protocol": "tcp"}]})
    result = runtime.add(conf, att)
    assert 4 in pod_ips(result)
    srv = serve(lab, pod, 80, "corpus-pod")
    try:
        assert fetch(lab, client, NODE4, 8080) == "corpus-pod"
        assert fetch(lab, lab.node, "127.0.0.1", 8080) == "corpus-pod"
        bridge = run["plugins"][0]
        if bridge.get("promiscMode") and not bridge.get("hairpinMode"):
            # With br_netfilter (on here, as on Kubernetes nodes) a hairpinned frame goes back out
            # the port it came in; kubelet's hairpin-veth mode turns that on for such bridges.
            veth = next(i["name"] for i in result["interfaces"] if not i.get("sandbox") and i["name"] != bridge["bridge"])
            lab.run(lab.node, "ip", "link", "set", veth, "type", "bridge_slave", "hairpin", "on")
        if bridge.get("hairpinMode") or bridge.get("promiscMode"):
            # hairpin: the pod reaches its own hostPort through the node (our masquerade)
            gw = result["ips"][0].get("gateway") or NODE4
            assert fetch(lab, pod, gw, 8080) == "corpus-pod"
            assert fetch(lab, pod, NODE4, 8080) == "corpus-pod"
        if not run["cniVersion"].startswith(("0.1", "0.2", "0.3")):
            runtime.check(conf, att)
    finally:
        srv.kill()
        srv.wait()
    runtime.delete(conf, Attachment("ctr-corpus", pod, "eth0"))
    assert fetch(lab, client, NODE4, 8080) == ""
    assert table(lab).owners() == []
