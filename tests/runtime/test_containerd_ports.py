"""hostPorts through containerd's CRI: pods described as the kubelet does, traffic from outside.

containerd's go-cni hands the ``portMappings`` capability to the chain as Go structs without json
tags (``{"HostPort": .., "ContainerPort": .., "Protocol": "tcp", "HostIP": ""}``), which is what
these tests exercise end to end: RunPodSandbox must succeed, and a client in another namespace must
reach the pod through the node's address and the hostPort.
"""

from __future__ import annotations

import pytest

from cnichain.tools.containerd_node import ocimage

from . import leftovers, traffic
from .conftest import CriNode
from .cri_client import Port, PodSpec
from .node import NETWORK, NODE_IP, NODE_IP2

pytestmark = [pytest.mark.runtime, pytest.mark.integration]


def test_hostport_tcp_reaches_container(cri_node: CriNode) -> None:
    """A busybox httpd container in the pod serves a page through hostPort 18081 -> 80."""
    node, cri = cri_node.node, cri_node.cri
    pod = cri.run_pod(PodSpec(name="web", ports=[Port(container_port=80, host_port=18081)]))
    assert pod.ip.startswith("10.22.")
    sent = leftovers.cached_capability_args(node.node_run, NETWORK, pod.id)["portMappings"]
    assert sent == [{"HostPort": 18081, "ContainerPort": 80, "Protocol": "tcp", "HostIP": ""}]
    container = cri.start_container(pod, "httpd", cri_node.image, ["/bin/httpd"], ["-f", "-p", "80", "-h", "/www"])
    assert cri.container_state(container) == cri.pb.CONTAINER_RUNNING
    traffic.wait_listening(traffic.pod_argv(pod.pid), 80)
    reply = traffic.http_get(node.client_argv(), NODE_IP, 18081)
    assert b"200 OK" in reply and ocimage.PAGE in reply, reply
    assert leftovers.portmap_pods(node.node_run) > 0

    cri.stop_pod(pod.id)
    cri.remove_pod(pod.id)
    assert leftovers.everything(node.node_run) == []
    assert traffic.tcp_request(node.client_argv(), NODE_IP, 18081, b"x", attempts=1) == b""


def test_hostport_udp_and_host_ip(cri_node: CriNode) -> None:
    """UDP 18082 -> 53 for every address, TCP 18083 -> 8080 only on the node's first address."""
    node, cri = cri_node.node, cri_node.cri
    pod = cri.run_pod(PodSpec(name="dns", ports=[
        Port(container_port=53, host_port=18082, protocol="UDP"),
        Port(container_port=8080, host_port=18083, host_ip=NODE_IP),
    ]))
    in_pod = traffic.pod_argv(pod.pid)
    udp = traffic.start_echo(in_pod, 53, "udp")
    tcp = traffic.start_echo(in_pod, 8080, "tcp")
    try:
        for address in (NODE_IP, NODE_IP2):
            assert traffic.udp_exchange(node.client_argv(), address, 18082, b"ping-udp\n") == b"ping-udp\n"
        assert traffic.tcp_request(node.client_argv(), NODE_IP, 18083, b"ping-tcp\n") == b"ping-tcp\n"
        # hostIP set: the same port on the node's other address is not mapped
        assert traffic.tcp_request(node.client_argv(), NODE_IP2, 18083, b"x", attempts=1) == b""
    finally:
        traffic.stop(udp)
        traffic.stop(tcp)
    cri.stop_pod(pod.id)
    cri.remove_pod(pod.id)
    assert leftovers.everything(node.node_run) == []
