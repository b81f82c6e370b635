"""End to end on a node without Python: the agent pod serves the host's executables, the executables
run cold from the tree when it is gone, and an upgrade lands while pods come and go.

The node is the harness's throwaway node with Python, libpython, the standard library and the
shells hidden (tests/runtime/bundlenode.py); the image's installer puts the tree, the native shims
and their cold launchers into the node's ``/opt/cni`` and the conflist into its ``/etc/cni/net.d``
(both private to the node).  The agent is the image itself,
run by podman inside the node the way the DaemonSet runs its agent container: ``--network host
--pid host --privileged``, the node's ``/run/cnichain`` bind-mounted, private ``--root``/
``--runroot``, ``--runtime runc`` and explicit ulimits.  containerd's CRI then execs the shims on
the "host" (the node's mount and network namespaces); the agent's workers enter those namespaces
from the caller's /proc entries, so a warm request runs where a cold exec would.  Warm use is
proven by the agent's own request counters; cold use by a pod that works while nothing answers on
the socket.

The upgrade runs with the agent absent (as during a DaemonSet rolling update, when the old pod is
gone before the new init container runs): a second tree, built with another build stamp and so
another version id, is installed by its own installer (bind-mounted over the image's prefix) while
a bounded loop runs RunPodSandbox/StopPodSandbox/RemovePodSandbox through the cold path.  Then the
image's agent (the previous version now) is started and must still serve a pod.
"""

from __future__ import annotations

import re
import shutil
import threading
import time
from types import ModuleType

import pytest

from cnichain.agent.sockets import answers
from cnichain.node.bundle import layout

from cnichain.tools.containerd_node import ocimage
from cnichain.tools.containerd_node.process import plugin_failures

from . import leftovers, traffic
from .bundlenode import (AGENT_SOCKET, AgentPod, NodeImage, checks_run, hide_python_and_shells, install_with_image,
                         node_dirs, start_cri)
from .containerd import Release
from .cri_client import PodSpec, Port
from .node import NETWORK, NODE_IP, Node
from .statuspoll import Poller

pytestmark = [pytest.mark.runtime, pytest.mark.integration]

SHAPED = {"kubernetes.io/ingress-bandwidth": "10M", "kubernetes.io/egress-bandwidth": "20M"}
CHAIN = ("bridge", "portmap", "bandwidth", "tuning", "route-override")
_SAMPLE = re.compile(r'^cnichain_agent_requests_total\{plugin="([^"]+)",command="([^"]+)",outcome="([^"]+)"\} (\d+)$',
                     re.M)


def request_counts(metrics: str) -> dict[tuple[str, str, str], int]:
    """(plugin, command, outcome) -> requests, from the agent's Prometheus text."""
    return {(p, c, o): int(n) for p, c, o, n in _SAMPLE.findall(metrics)}


def pod_with_port_and_bandwidth(node: Node, cri, busybox: str, name: str, host_port: int) -> None:
    """A pod with a hostPort and bandwidth annotations: reachable from outside the node, shaped, and
    leaving nothing behind once stopped and removed."""
    pod = cri.run_pod(PodSpec(name=name, ports=[Port(container_port=80, host_port=host_port)], annotations=SHAPED))
    assert pod.ip.startswith("10.22.")
    sent = leftovers.cached_capability_args(node.node_run, NETWORK, pod.id)["bandwidth"]
    assert (sent["IngressRate"], sent["EgressRate"]) == (10_000_000, 20_000_000)
    # bandwidth's default layout (split): a TBF on the host veth, the pod's own on eth0, no IFB.
    assert leftovers.ifbs(node.node_run) == []
    assert any(q.startswith("qdisc tbf on veth") for q in leftovers.shaping_qdiscs(node.node_run))
    container = cri.start_container(pod, "httpd", busybox, ["/bin/httpd"], ["-f", "-p", "80", "-h", "/www"])
    assert cri.container_state(container) == cri.pb.CONTAINER_RUNNING
    traffic.wait_listening(traffic.pod_argv(pod.pid), 80)
    reply = traffic.http_get(node.client_argv(), NODE_IP, host_port)
    assert b"200 OK" in reply and ocimage.PAGE in reply, reply
    assert leftovers.portmap_pods(checks_run(node)) > 0  # the leftovers check sees the rules
    cri.stop_pod(pod.id)
    cri.remove_pod(pod.id)
    assert leftovers.everything(checks_run(node)) == []


def installed_node(node_image: NodeImage, node: Node, release: Release) -> tuple[str, str]:
    hide_python_and_shells(node)
    bin_dir, conf_dir = node_dirs(node)
    installed = install_with_image(node, node_image, bin_dir, conf_dir, release.cni_version)
    assert installed.returncode == 0, installed.stdout + installed.stderr
    assert installed.stdout.count("verified ") == 6
    return bin_dir, conf_dir


def test_agent_pod_serves_the_hosts_executables_and_they_run_cold_without_it(
        containerd_release: Release, node_image: NodeImage, cri_api: tuple[ModuleType, ModuleType],
        image_archive: tuple[str, str]) -> None:
    archive, busybox = image_archive
    node = Node(agent_socket="")
    cri = containerd = agent = None
    try:
        bin_dir, conf_dir = installed_node(node_image, node, containerd_release)
        containerd, cri = start_cri(containerd_release, node, cri_api, archive, busybox, bin_dir, conf_dir)
        agent = AgentPod(node, node_image)
        agent.start()
        assert request_counts(agent.metrics()) == {}
        pod_with_port_and_bandwidth(node, cri, busybox, "warm", 18092)
        counts = request_counts(agent.metrics())
        print(f"agent requests: {sorted(counts.items())}")  # shown with -s / -rP
        for plugin in CHAIN:  # every plugin of the chain ran in the agent, both ways, and succeeded
            assert counts.get((plugin, "ADD", "ok"), 0) >= 1, counts
            assert counts.get((plugin, "DEL", "ok"), 0) >= 1, counts
        # bridge's IPAM delegate ran in place, in bridge's worker: an exec of the tree's host-local
        # would have come back to this agent as a request of its own
        assert not any(p == "host-local" for (p, _c, _o) in counts), counts
        assert all(outcome == "ok" for (_p, _c, outcome) in counts), counts

        agent.stop()
        assert not answers(f"/proc/{node.holder.pid}/root{AGENT_SOCKET}")  # nobody serves: shims go cold
        pod_with_port_and_bandwidth(node, cri, busybox, "cold", 18092)
    except BaseException:
        print_logs(containerd, agent)
        raise
    finally:
        if agent is not None:
            agent.stop()
        if cri is not None:
            cri.close()
        node.close()


MAX_CYCLES = 40  # pod add/delete cycles at most
AFTER_UPGRADE = 3  # cycles that must start after the install finished
LOOP_SECONDS = 360.0


def test_upgrade_to_a_rebuilt_tree_while_pods_come_and_go(
        containerd_release: Release, node_image: NodeImage, cri_api: tuple[ModuleType, ModuleType],
        image_archive: tuple[str, str],
        tmp_path_factory: pytest.TempPathFactory) -> None:
    from cnichain.node.bundle.build import build

    archive, busybox = image_archive
    out2 = str(tmp_path_factory.mktemp("e2e-tree2"))
    node = Node(agent_socket="")
    cri = containerd = agent = None
    stop = threading.Event()
    first_done, upgraded = threading.Event(), threading.Event()
    errors: list[str] = []
    cycles = {"total": 0, "after": 0, "during": 0}  # "during": cycles overlapping the install
    installing = threading.Event()

    def loop() -> None:
        deadline = time.monotonic() + LOOP_SECONDS
        for i in range(MAX_CYCLES):
            if stop.is_set() or time.monotonic() > deadline or cycles["after"] >= AFTER_UPGRADE:
                return
            started_after = upgraded.is_set()
            try:
                pod = cri.run_pod(PodSpec(name=f"loop{i}", ports=[Port(container_port=80, host_port=18093)],
                                          annotations=SHAPED))
                cri.stop_pod(pod.id)
                cri.remove_pod(pod.id)
            except Exception as exc:  # noqa: BLE001 - every failure is a finding
                errors.append(f"cycle {i}: {exc}")
            cycles["total"] += 1
            cycles["after"] += started_after
            cycles["during"] += installing.is_set() and not started_after  # began before it ended, ended after it began
            first_done.set()

    worker = None
    try:
        second = build(out2, layout.DEFAULT_PREFIX, stamp="e2e-upgrade")
        assert second.tree_id != node_image.report.tree_id
        bin_dir, conf_dir = installed_node(node_image, node, containerd_release)
        containerd, cri = start_cri(containerd_release, node, cri_api, archive, busybox, bin_dir, conf_dir)
        worker = threading.Thread(target=loop, name="pod-loop", daemon=True)
        with Poller(cri) as poller:  # NetworkReady (2.1: CNI STATUS of the chain) through the upgrade
            worker.start()
            assert first_done.wait(120), "the first pod cycle did not finish"
            installing.set()
            upgrade = install_with_image(node, node_image, bin_dir, conf_dir, containerd_release.cni_version,
                                         tree_out=out2)
            upgraded.set()
            assert upgrade.returncode == 0, upgrade.stdout + upgrade.stderr
            assert upgrade.stdout.count("verified ") == 6
            worker.join(LOOP_SECONDS + 60)
            assert not worker.is_alive(), "the pod loop did not end"
        assert poller.polls > 0 and poller.not_ready == [], (poller.polls, poller.not_ready)
        print(f"pod cycles: {cycles}; installer: {upgrade.stdout.strip()}")  # shown with -s / -rP
        assert errors == [], errors
        assert cycles["after"] >= AFTER_UPGRADE and cycles["during"] >= 1, cycles
        current = node.node_run("readlink", layout.current_link(layout.DEFAULT_PREFIX)).stdout.strip()
        assert current == f"versions/{second.tree_id}"
        versions = node.node_run("ls", layout.versions_dir(layout.DEFAULT_PREFIX)).stdout.split()
        assert sorted(versions) == sorted([node_image.report.tree_id, second.tree_id])  # previous kept
        assert cri.list_pods() == []
        assert leftovers.everything(checks_run(node)) == []
        assert plugin_failures(containerd.log) == []  # no plugin exec failed, not even one containerd retried
        # An agent of the previous version (the image's tree) still serves once `current` moved on:
        # its workers import from its own version directory, which the install kept.
        agent = AgentPod(node, node_image)
        agent.start()
        pod_with_port_and_bandwidth(node, cri, busybox, "after", 18093)
        counts = request_counts(agent.metrics())
        assert counts.get(("portmap", "ADD", "ok"), 0) >= 1 and all(o == "ok" for (_p, _c, o) in counts), counts
    except BaseException:
        print_logs(containerd, agent)
        raise
    finally:
        stop.set()
        if agent is not None:
            agent.stop()
        if worker is not None:
            worker.join(120)
        if cri is not None:
            cri.close()
        node.close()
        shutil.rmtree(out2, ignore_errors=True)


def print_logs(containerd, agent) -> None:
    """On a failure, what containerd (CNI errors) and the agent logged, into the test report."""
    if containerd is not None:
        print(f"containerd log tail:\n{containerd.log_tail()}")
    if agent is not None:
        print(f"agent log tail:\n{agent.logs()}")
