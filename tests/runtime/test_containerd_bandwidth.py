"""Bandwidth annotations through containerd's CRI, measured with iperf3 in both directions.

The kubelet passes ``kubernetes.io/ingress-bandwidth`` / ``egress-bandwidth`` as pod annotations;
containerd turns them into the ``bandwidth`` capability (Go struct field names; containerd 1.6 sets
each burst to 4294967295 bits, so the shaper must still hold the rate with a huge bucket).  Ingress and egress get different rates so that swapped directions cannot pass.
"""

from __future__ import annotations

import pytest

from . import leftovers, traffic
from .conftest import CriNode
from .cri_client import PodSpec
from .node import NETWORK

pytestmark = [pytest.mark.runtime, pytest.mark.integration]

INGRESS = 10_000_000  # "10M": bits/s into the pod
EGRESS = 20_000_000  # "20M": bits/s out of the pod


def test_bandwidth_annotations_shape_both_directions(cri_node: CriNode) -> None:
    node, cri = cri_node.node, cri_node.cri
    pod = cri.run_pod(PodSpec(name="shaped", annotations={
        "kubernetes.io/ingress-bandwidth": "10M",
        "kubernetes.io/egress-bandwidth": "20M",
    }))
    sent = leftovers.cached_capability_args(node.node_run, NETWORK, pod.id)["bandwidth"]
    assert (sent["IngressRate"], sent["EgressRate"]) == (INGRESS, EGRESS)
    # bandwidth's default layout (split): a TBF on the host veth, the pod's own on eth0, no IFB.
    assert leftovers.ifbs(node.node_run) == []
    assert any(q.startswith("qdisc tbf on veth") for q in leftovers.shaping_qdiscs(node.node_run))
    in_pod, client = traffic.pod_argv(pod.pid), node.client_argv()

    def ingress() -> float:
        return traffic.iperf_rate(in_pod, client, pod.ip, reverse=False, seconds=4)

    def egress() -> float:
        return traffic.iperf_rate(in_pod, client, pod.ip, reverse=True, seconds=4)

    ok_in, rates_in = traffic.rate_within(ingress, INGRESS)
    ok_out, rates_out = traffic.rate_within(egress, EGRESS)
    print(f"measured ingress {rates_in} bit/s, egress {rates_out} bit/s")  # shown with -s / -rP
    assert ok_in, f"ingress {rates_in} bit/s, want {INGRESS} +-10%"
    assert ok_out, f"egress {rates_out} bit/s, want {EGRESS} +-10%"

    cri.stop_pod(pod.id)
    cri.remove_pod(pod.id)
    assert leftovers.everything(node.node_run) == []
