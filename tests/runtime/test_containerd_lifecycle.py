"""Pod lifecycle through containerd's CRI: what the chain does to a pod, and that DEL undoes it.

Covers the rest of the default chain (tuning's sysctl and route-override's route, read back in
the pod), a pod without ports or annotations passing through untouched, and containerd being
killed and restarted between ADD and DEL (DEL then comes from the restarted process, with only
the state containerd and libcni kept on disk).
"""

from __future__ import annotations

import json
import subprocess

import pytest

from . import leftovers, traffic
from .conftest import CriNode
from .cri_client import Port, PodSpec
from .node import NETWORK, NODE_IP

pytestmark = [pytest.mark.runtime, pytest.mark.integration]

# What conflists/cnichain-default.conflist asks of tuning and route-override.
SYSCTL = ("net/core/somaxconn", "1024")
ROUTE = ("192.0.2.0/24", "10.22.0.1")


def _in_pod(pid: int, *argv: str) -> str:
    return subprocess.run(traffic.pod_argv(pid, *argv), check=True, capture_output=True, text=True,
                          timeout=30).stdout


def test_tuning_sysctl_and_route_override_in_pod(cri_node: CriNode) -> None:
    node, cri = cri_node.node, cri_node.cri
    pod = cri.run_pod(PodSpec(name="tuned"))
    assert _in_pod(pod.pid, "cat", f"/proc/sys/{SYSCTL[0]}").strip() == SYSCTL[1]
    routes = json.loads(_in_pod(pod.pid, "ip", "-j", "route", "show", ROUTE[0]))
    assert [(r["dst"], r.get("gateway")) for r in routes] == [ROUTE]
    assert leftovers.files_in(node.node_run, leftovers.TUNING_DIR), "tuning keeps its backup while the pod lives"

    cri.stop_pod(pod.id)
    cri.remove_pod(pod.id)
    assert leftovers.everything(node.node_run) == []


def test_pod_without_ports_or_annotations_is_untouched(cri_node: CriNode) -> None:
    node, cri = cri_node.node, cri_node.cri
    pod = cri.run_pod(PodSpec(name="plain"))
    assert pod.ip.startswith("10.22.")
    assert leftovers.portmap_entries(node.node_run) == []
    assert leftovers.ifbs(node.node_run) == []
    assert leftovers.shaping_qdiscs(node.node_run) == []
    assert len(leftovers.pod_veths(node.node_run)) == 1
    assert len(leftovers.ipam_reservations(node.node_run)) == 1

    cri.stop_pod(pod.id)
    cri.remove_pod(pod.id)
    assert leftovers.everything(node.node_run) == []


def test_stop_then_remove_leave_nothing(cri_node: CriNode) -> None:
    """StopPodSandbox alone already releases the network; RemovePodSandbox drops the rest."""
    node, cri = cri_node.node, cri_node.cri
    pod = cri.run_pod(PodSpec(name="full", ports=[Port(80, 18084), Port(53, 18085, "UDP")], annotations={
        "kubernetes.io/ingress-bandwidth": "10M", "kubernetes.io/egress-bandwidth": "10M"}))
    assert leftovers.portmap_pods(node.node_run) > 0
    assert leftovers.shaping_qdiscs(node.node_run)  # the host veth's TBF (the default layout shapes egress in the pod)
    assert leftovers.files_in(node.node_run, leftovers.NETNS_DIR)
    # the release under test runs its own shim, not the system's
    assert cri_node.containerd.shim_executables() == {cri_node.containerd.release.binary("containerd-shim-runc-v2")}

    cri.stop_pod(pod.id)
    assert leftovers.everything(node.node_run, with_netns=False) == []
    cri.stop_pod(pod.id)  # the kubelet may stop more than once; must stay idempotent
    cri.remove_pod(pod.id)
    assert leftovers.everything(node.node_run) == []
    assert cri.list_pods() == []


@pytest.mark.declare_capabilities("dns", "io.kubernetes.cri.pod-annotations")
def test_go_shaped_dns_and_annotation_capabilities_reach_every_plugin(cri_node: CriNode) -> None:
    """With every plugin asking for them, containerd sends ``dns`` as ``{"Servers": ..}`` and the
    pod annotations to the whole chain, next to the hostPort; ADD and DEL must both accept it."""
    node, cri = cri_node.node, cri_node.cri
    pod = cri.run_pod(PodSpec(name="dns", ports=[Port(8080, 18087)],
                              annotations={"kubernetes.io/egress-bandwidth": "10M"}))
    sent = leftovers.cached_capability_args(node.node_run, NETWORK, pod.id)
    assert sent["dns"]["Servers"] == ["10.96.0.10"] and "Searches" in sent["dns"]
    assert sent["io.kubernetes.cri.pod-annotations"]["kubernetes.io/egress-bandwidth"] == "10M"
    echo = traffic.start_echo(traffic.pod_argv(pod.pid), 8080, "tcp")
    try:
        assert traffic.tcp_request(node.client_argv(), NODE_IP, 18087, b"dns\n") == b"dns\n"
    finally:
        traffic.stop(echo)
    cri.stop_pod(pod.id)
    cri.remove_pod(pod.id)
    assert leftovers.everything(node.node_run) == []


def test_containerd_restart_between_add_and_del(cri_node: CriNode) -> None:
    node, cri = cri_node.node, cri_node.cri
    pod = cri.run_pod(PodSpec(name="survivor", ports=[Port(8080, 18086)], annotations={
        "kubernetes.io/ingress-bandwidth": "10M"}))
    echo = traffic.start_echo(traffic.pod_argv(pod.pid), 8080, "tcp")
    try:
        assert traffic.tcp_request(node.client_argv(), NODE_IP, 18086, b"before\n") == b"before\n"
        cri_node.containerd.restart()
        cri.wait_ready()
        assert [p.id for p in cri.list_pods()] == [pod.id]
        assert traffic.tcp_request(node.client_argv(), NODE_IP, 18086, b"after\n") == b"after\n"
    finally:
        traffic.stop(echo)
    cri.stop_pod(pod.id)
    cri.remove_pod(pod.id)
    assert leftovers.everything(node.node_run) == []
