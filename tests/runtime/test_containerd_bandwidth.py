"""Bandwidth annotations through containerd's CRI, measured with iperf3 in both directions.

The kubelet passes ``kubernetes.io/ingress-bandwidth`` / ``egress-bandwidth`` as pod annotations;
containerd turns them into the ``bandwidth`` capability (Go struct field names, each burst
4294967295 bits: the kubelet has no burst field), so a pod with only the two annotations must get
its rate from the first byte and a queue bounded in time, at every containerd release of the
matrix.  Ingress and egress get different rates so that swapped directions cannot pass.
"""

from __future__ import annotations

import pytest

from cnichain.plugins.bandwidth.plan import CONTAINERD_BURST
from tests.integration.bandwidth_lab import flow_as_asked

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
    # Containerd's own "no burst" (2^32-1 bits each way) came with the rates: the first second
    # counted, a ping beside the bulk flow (tests/integration/bandwidth_lab.py has the bounds).
    assert (sent["IngressBurst"], sent["EgressBurst"]) == (CONTAINERD_BURST, CONTAINERD_BURST)
    in_pod, client = traffic.pod_argv(pod.pid), node.client_argv()
    seen = {direction: flow_as_asked(in_pod, client, pod.ip, target, reverse)
            for direction, target, reverse in (("ingress", INGRESS, False), ("egress", EGRESS, True))}
    print(f"measured {seen}")  # shown with -s / -rP
    assert all(ok for ok, _ in seen.values()), seen

    cri.stop_pod(pod.id)
    cri.remove_pod(pod.id)
    assert leftovers.everything(node.node_run) == []
