"""Our meta plugins chained after kindnet's ptp, through containerd's CRI.

The node's conflist is the one ``cnichain node install --mode chain`` derives (node/chain.py) from
kindnet's own (tests/data/corpus/kind-kindnet.conflist, the pod range set to the node's), with
tuning added; ptp itself is the reference 1.9.1's (containerd 2.1 sends STATUS, which 1.1.1's
ptp does not know). A pod as the
kubelet describes it (a hostPort, both bandwidth annotations): reached from outside through the
hostPort, shaped +-10 % both ways, tuning's sysctl in place, nothing left after
StopPodSandbox + RemovePodSandbox.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess

import pytest

from cnichain.node import chain
from cnichain.tools import debcache

from . import leftovers, traffic
from .conftest import CriNode
from .cri_client import Port, PodSpec
from .node import NODE_IP, POD_SUBNET, Node

pytestmark = [pytest.mark.runtime, pytest.mark.integration]

CORPUS = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "data", "corpus")
INGRESS, EGRESS = 10_000_000, 20_000_000
HOST_PORT = 18095


@pytest.fixture
def kindnet_chain(node: Node) -> str:
    """The node's conflist replaced by the one chain mode derives from kindnet's; ptp in its bin dir."""
    with open(os.path.join(CORPUS, "kind-kindnet.conflist"), "rb") as fh:
        primary = chain.load_primary("10-kindnet.conflist", fh.read())
    primary["plugins"][0]["ipam"]["ranges"] = [[{"subnet": POD_SUBNET}]]
    primary["plugins"][0]["ipam"].pop("dataDir", None)  # the node's own state paths (a tmpfs here)
    derived = chain.derive(primary, chain.DEFAULT_ADDED + (
        {"type": "tuning", "sysctl": {"net.ipv4.conf.IFNAME.arp_filter": "1"}},))
    for plugin in derived["plugins"]:  # the node's bin dir holds ours under the plain names
        if plugin["type"].startswith(chain.OUR_PREFIX):
            plugin["type"] = plugin["type"][len(chain.OUR_PREFIX):]
    with open(node.conflist_path) as fh:
        derived["name"] = json.load(fh)["name"]  # the network name the leftovers checks look for
    with open(node.conflist_path, "w") as fh:
        json.dump(derived, fh, indent=2)
    reference = debcache.reference_plugins_dir("sid")  # ./run fetches it: missing is a failure
    assert reference and os.path.isfile(os.path.join(reference, "ptp")), "reference plugins 1.9.1 missing"
    shutil.copy2(os.path.join(reference, "ptp"), os.path.join(node.bin_dir, "ptp"))
    return node.conflist_path


def test_kindnet_ptp_chain(kindnet_chain: str, cri_node: CriNode) -> None:
    node, cri = cri_node.node, cri_node.cri
    pod = cri.run_pod(PodSpec(name="ptp", ports=[Port(container_port=8080, host_port=HOST_PORT)], annotations={
        "kubernetes.io/ingress-bandwidth": "10M",
        "kubernetes.io/egress-bandwidth": "20M",
    }))
    in_pod, client = traffic.pod_argv(pod.pid), node.client_argv()
    echo = traffic.start_echo(in_pod, 8080, "tcp")
    try:
        assert traffic.tcp_request(client, NODE_IP, HOST_PORT, b"ping-ptp\n") == b"ping-ptp\n"
    finally:
        traffic.stop(echo)
    sysctl = subprocess.run(traffic.pod_argv(pod.pid, "cat", "/proc/sys/net/ipv4/conf/eth0/arp_filter"),
                            capture_output=True, text=True, timeout=30)
    assert sysctl.stdout.strip() == "1", sysctl.stderr
    ok_in, rates_in = traffic.rate_within(lambda: traffic.iperf_rate(in_pod, client, pod.ip, reverse=False,
                                                                     seconds=4), INGRESS)
    ok_out, rates_out = traffic.rate_within(lambda: traffic.iperf_rate(in_pod, client, pod.ip, reverse=True,
                                                                       seconds=4), EGRESS)
    print(f"ptp chain: measured ingress {rates_in} bit/s, egress {rates_out} bit/s")
    assert ok_in and ok_out, (rates_in, rates_out)
    cri.stop_pod(pod.id)
    cri.remove_pod(pod.id)
    assert leftovers.everything(node.node_run) == []
