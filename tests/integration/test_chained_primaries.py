"""Our meta plugins chained after the primaries nodes run, in the kernel lab: the conflist is what
``cnichain node install --mode chain`` derives from each primary's own (node/chain.py), with
tuning and route-override added, run pod by pod as a runtime runs it.

Primaries: the reference ptp (kindnet's conflist from the corpus), the reference macvlan, a routed
veth without a bridge (Calico's shape: tests/data/fake_calico.py builds it) and our bridge.  For
each: a hostPort reached from a client outside the node (portmap; not for macvlan, whose parent
cannot reach its own macvlan children), both directions shaped +-10 % (iperf3), tuning's sysctl
and route-override's route in the pod, CHECK, and DEL leaving the node as it was.
"""

from __future__ import annotations

import copy
import json
import os
import sys

import pytest

from cnichain.node import chain
from cnichain.tools.lab import isolate_conflist, rate_within
from cnichain.podstate.runtime import Attachment, ConfList

from tests.integration import footprint
from tests.integration.portmap_traffic import fetch, serve

pytestmark = pytest.mark.integration

DATA = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "data")
# A different rate each way, 40 % apart (the tolerance is 10 %): a plugin that shaped ingress as
# egress, or the other way, fails both measurements.
RATE = 10_000_000  # ingress: into the pod
EGRESS_RATE = 6_000_000  # out of the pod
LIMITS = {"ingressRate": RATE, "ingressBurst": 1_000_000, "egressRate": EGRESS_RATE, "egressBurst": 1_000_000}
NODE_IP, CLIENT_IP = "192.168.88.1", "192.168.88.2"
HOST_PORT, POD_PORT = 8088, 80
ADDED = chain.DEFAULT_ADDED + (
    {"type": "tuning", "sysctl": {"net.ipv4.conf.IFNAME.arp_filter": "1"}},
    {"type": "route-override", "addroutes": [{"dst": "192.0.2.0/24"}]},
)


def _kindnet() -> dict:
    with open(os.path.join(DATA, "corpus", "kind-kindnet.conflist")) as fh:
        conf = json.load(fh)
    conf["plugins"][0]["ipam"]["ranges"] = [[{"subnet": "10.66.0.0/24"}]]
    return conf


PRIMARIES = {
    "ptp": (_kindnet, "10.66.0.0/24"),
    "macvlan": (lambda: {"cniVersion": "1.0.0", "name": "mvnet", "plugins": [
        {"type": "macvlan", "master": "up0", "mode": "bridge",
         "ipam": {"type": "host-local", "subnet": "10.79.0.0/24", "rangeStart": "10.79.0.10"}}]}, ""),
    "routed-veth": (lambda: {"cniVersion": "1.0.0", "name": "k8s-pod-network", "plugins": [
        {"type": "calico", "podIP": "10.67.0.5"}, {"type": "portmap", "snat": True,
                                                   "capabilities": {"portMappings": True}}]}, "10.67.0.0/24"),
    "bridge": (lambda: {"cniVersion": "1.0.0", "name": "brnet", "plugins": [
        {"type": "bridge", "bridge": "cni0", "isGateway": True, "isDefaultGateway": True,
         "ipam": {"type": "host-local", "subnet": "10.77.0.0/24"}}]}, "10.77.0.0/24"),
}


def _lab_types(conf: dict) -> dict:
    """The lab installs our executables under the plain names; the derived conflist names them
    ``cnichain-*`` (what chain mode installs next to the primary's): map them back."""
    out = copy.deepcopy(conf)
    for p in out["plugins"]:
        if p["type"].startswith(chain.OUR_PREFIX):
            p["type"] = p["type"][len(chain.OUR_PREFIX):]
    return out


@pytest.fixture
def fake_calico(tmp_path) -> str:
    folder = tmp_path / "fakebin"
    folder.mkdir()
    target = folder / "calico"
    with open(os.path.join(DATA, "fake_calico.py")) as src:
        body = src.read().split("\n", 1)[1]
    target.write_text(f"#!{sys.executable}\n{body}")
    target.chmod(0o755)
    return str(folder)


@pytest.mark.parametrize("primary", list(PRIMARIES))
def test_meta_plugins_after_primary(lab, make_runtime, plugin_dir, reference_dir, fake_calico, primary):
    build, pod_subnet = PRIMARIES[primary]
    derived = chain.derive(build(), ADDED)
    assert [p["type"] for p in derived["plugins"]][-4:] == [
        "cnichain-portmap", "cnichain-bandwidth", "cnichain-tuning", "cnichain-route-override"]
    conf = ConfList.from_dict(isolate_conflist(_lab_types(derived), lab.workdir))
    rt = make_runtime([plugin_dir, reference_dir, fake_calico])

    client = lab.netns("client")
    lab.wire(client, [f"{CLIENT_IP}/24"], [f"{NODE_IP}/24"], "cli")
    peer = client
    if primary == "macvlan":
        peer = lab.netns("lan")
        lab.run(lab.node, "ip", "link", "add", "up0", "type", "veth", "peer", "name", "lan0", "netns",
                os.path.basename(peer))
        lab.run(peer, "ip", "addr", "add", "10.79.0.100/24", "dev", "lan0")
        lab.run(peer, "ip", "link", "set", "lan0", "up")
        lab.run(lab.node, "ip", "addr", "add", "10.79.0.1/24", "dev", "up0")  # portmap's snat wants a route
        lab.run(lab.node, "ip", "link", "set", "up0", "up")
    else:
        lab.run(client, "ip", "route", "add", pod_subnet, "via", NODE_IP)
    if primary == "routed-veth":
        # Calico's proxy ARP answers for 169.254.1.1 because the node routes it elsewhere (its
        # default route); a lab node has none of its own.
        lab.run(lab.node, "ip", "route", "add", "default", "via", CLIENT_IP)
    before = footprint.footprint(lab)

    pod = lab.netns("pod")
    att = Attachment("ctr1", pod, "eth0", capability_args={
        "portMappings": [{"hostPort": HOST_PORT, "containerPort": POD_PORT, "protocol": "tcp"}],
        "bandwidth": dict(LIMITS)})
    result = rt.add(conf, att)
    pod_ip = result["ips"][0]["address"].split("/")[0]

    assert lab.run(pod, "sysctl", "-n", "net.ipv4.conf.eth0.arp_filter").stdout.strip() == "1"  # tuning
    assert "192.0.2.0/24" in lab.run(pod, "ip", "route", "show").stdout  # route-override
    if primary != "macvlan":
        server = serve(lab, pod, POD_PORT, f"hello-{primary}")
        try:
            assert fetch(lab, client, NODE_IP, HOST_PORT) == f"hello-{primary}"  # portmap, from outside
        finally:
            server.kill()
            server.wait()
    ok_in, into_pod = rate_within(lambda: lab.iperf(pod, peer, pod_ip, seconds=4), RATE)
    ok_out, out_of_pod = rate_within(lambda: lab.iperf(pod, peer, pod_ip, seconds=4, reverse=True), EGRESS_RATE)
    print(f"{primary}: into the pod {into_pod} bit/s, out of it {out_of_pod} bit/s")
    assert ok_in and ok_out, (into_pod, out_of_pod)
    if conf.cni_version not in ("0.3.0", "0.3.1"):
        rt.check(conf, att)

    rt.delete(conf, att)
    assert footprint.difference(before, footprint.footprint(lab)) == {}
