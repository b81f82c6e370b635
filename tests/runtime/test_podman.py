"""Podman with its CNI backend on our chain: published ports, the chain's pod settings, cleanup.

Podman passes ``portMappings`` in camelCase and has no way to ask for bandwidth, so this covers
what podman can express: ``-p HOST:CTR``, ``-p HOST:CTR/udp`` and ``-p HOSTIP:HOST:CTR``, traffic
from the client namespace, tuning's sysctl and route-override's route inside the container's
netns, and a node left clean by ``podman rm -f``.
"""

from __future__ import annotations

import json
import subprocess
from typing import Iterator

import pytest

from cnichain.tools.containerd_node import ocimage

from . import leftovers, traffic
from .node import NODE_IP, NODE_IP2, Node
from .podman import Podman

pytestmark = [pytest.mark.runtime, pytest.mark.integration]


@pytest.fixture
def podman(node: Node, image_archive: tuple[str, str]) -> Iterator[Podman]:
    archive, image = image_archive
    pm = Podman(node)
    pm.load(archive, image)
    yield pm


def test_podman_published_ports(node: Node, podman: Podman) -> None:
    pid = podman.run("web", ocimage.IMAGE_NAME, ["18081:80", "18082:53/udp", f"{NODE_IP}:18083:8080"],
                     ["/bin/httpd", "-f", "-p", "80", "-h", "/www"])
    in_pod, client = traffic.pod_argv(pid), node.client_argv()
    traffic.wait_listening(in_pod, 80)
    assert ocimage.PAGE in traffic.http_get(client, NODE_IP, 18081)
    udp = traffic.start_echo(in_pod, 53, "udp")
    tcp = traffic.start_echo(in_pod, 8080, "tcp")
    try:
        assert traffic.udp_exchange(client, NODE_IP2, 18082, b"ping-udp\n") == b"ping-udp\n"
        assert traffic.tcp_request(client, NODE_IP, 18083, b"ping-tcp\n") == b"ping-tcp\n"
        assert traffic.tcp_request(client, NODE_IP2, 18083, b"x", attempts=1) == b""
    finally:
        traffic.stop(udp)
        traffic.stop(tcp)

    podman("rm", "-f", "-t", "0", "web")
    assert leftovers.everything(node.node_run) == []
    assert traffic.tcp_request(client, NODE_IP, 18081, b"x", attempts=1) == b""


def test_podman_chain_settings_and_cleanup(node: Node, podman: Podman) -> None:
    pid = podman.run("tuned", ocimage.IMAGE_NAME, [], ["/bin/sleep", "600"])
    read = subprocess.run(traffic.pod_argv(pid, "cat", "/proc/sys/net/core/somaxconn"),
                          check=True, capture_output=True, text=True, timeout=30).stdout
    assert read.strip() == "1024"
    routes = json.loads(subprocess.run(traffic.pod_argv(pid, "ip", "-j", "route", "show", "192.0.2.0/24"),
                                       check=True, capture_output=True, text=True, timeout=30).stdout)
    assert [(r["dst"], r.get("gateway")) for r in routes] == [("192.0.2.0/24", "10.22.0.1")]
    assert leftovers.portmap_entries(node.node_run) == []
    assert leftovers.ifbs(node.node_run) == [] and leftovers.shaping_qdiscs(node.node_run) == []

    podman("rm", "-f", "-t", "0", "tuned")
    assert leftovers.everything(node.node_run) == []
