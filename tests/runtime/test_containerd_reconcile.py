"""The agent's reconciler on a node run by a real containerd (CRI), pods as the kubelet describes them.

The agent runs in the node's network namespace and its reconciler in the node's private mount
namespace (``--mount-ns``, as the DaemonSet sets it to the host's), so it reads containerd's own
libcni result cache, and asks containerd's CRI ``ListPodSandbox`` (``--runtime-endpoint``).
"""

from __future__ import annotations

import os
from typing import Callable

import pytest

from cnichain.agent import running_agent
from cnichain.agent.reconcile import status as rstatus
from cnichain.agent.reconcile.settings import status_path

from tests import polling

from . import leftovers, traffic
from .conftest import CriNode
from .cri_client import Port, PodSpec
from .node import NETWORK, NODE_IP

pytestmark = [pytest.mark.runtime, pytest.mark.integration]

SHAPED = {"kubernetes.io/ingress-bandwidth": "100M", "kubernetes.io/egress-bandwidth": "100M"}



def wait_for(what: str, probe: Callable[[], object], timeout: float = 30.0, step: float = 0.1) -> object:
    """A runtime converges slower than the lab: a longer bound, a coarser step."""
    return polling.wait_for(what, probe, timeout, step)


def agent(cri_node: CriNode, *args: str):
    node = cri_node.node
    assert node.holder is not None
    sock = node.lab.path("agent", "agent.sock")
    return running_agent(sock, netns=node.lab.node, args=(
        "--pool", "0", "--mount-ns", f"/proc/{node.holder.pid}/ns/mnt", "--bin-dir", node.bin_dir,
        "--runtime-endpoint", cri_node.containerd.socket, *args))


def states(sock: str, pod_id: str) -> dict:
    doc = rstatus.read(status_path(sock)) or {}
    row = (doc.get("attachments") or {}).get(f"{NETWORK}/{pod_id}/eth0") or {}
    return {p: v.get("state") for p, v in (row.get("plugins") or {}).items()} | {"leak": row.get("leak", "")}


def web_pod(cri_node: CriNode, name: str, port: int):
    cri = cri_node.cri
    pod = cri.run_pod(PodSpec(name=name, ports=[Port(container_port=80, host_port=port)], annotations=dict(SHAPED)))
    cri.start_container(pod, "httpd", cri_node.image, ["/bin/httpd"], ["-f", "-p", "80", "-h", "/www"])
    traffic.wait_listening(traffic.pod_argv(pod.pid), 80)
    return pod


def answers(cri_node: CriNode, port: int) -> bool:
    return b"200 OK" in traffic.tcp_request(cri_node.node.client_argv(), NODE_IP, port, b"GET / HTTP/1.0\r\n\r\n",
                                            attempts=1)


def test_flushed_ruleset_and_deleted_qdiscs_come_back_under_containerd(cri_node: CriNode) -> None:
    node, cri = cri_node.node, cri_node.cri
    pod = web_pod(cri_node, "web", 18091)
    assert answers(cri_node, 18091)
    with agent(cri_node, "--sweep-interval", "600") as running:
        ok = {"bridge": "ok", "portmap": "ok", "bandwidth": "ok", "leak": ""}
        wait_for("the first sweep", lambda: states(running.socket_path, pod.id) == ok)
        node.node_run("nft", "flush", "ruleset")
        wait_for("the hostPort to answer again", lambda: answers(cri_node, 18091))
        for q in leftovers.shaping_qdiscs(node.node_run):
            kind, dev = q.split()[1], q.split()[-1]
            node.node_run("tc", "qdisc", "del", "dev", dev, "root" if kind == "tbf" else "ingress", check=False)
        assert not leftovers.shaping_qdiscs(node.node_run)
        wait_for("shaping to return", lambda: len(leftovers.shaping_qdiscs(node.node_run)) == 3)  # 2 TBF + ingress
        # The view is published after the pass that repaired: wait for it, bounded.
        wait_for("the repairs to be counted", lambda: 'repairs_total{plugin="bandwidth",outcome="ok"}' in running.metrics())
        assert 'cnichain_agent_reconcile_repairs_total{plugin="portmap",outcome="ok"} 1' in running.metrics()
    cri.stop_pod(pod.id)
    cri.remove_pod(pod.id)
    assert leftovers.everything(node.node_run) == []


def test_a_pod_whose_netns_vanished_is_kept_while_containerd_lists_it_and_collected_otherwise(
        cri_node: CriNode) -> None:
    node, cri = cri_node.node, cri_node.cri
    dead = web_pod(cri_node, "dead", 18092)
    live = web_pod(cri_node, "live", 18093)
    # The pod's processes die and its namespace is removed behind containerd's back.
    os.kill(dead.pid, 9)  # the sandbox's pause process; its container dies with the pid namespace
    node.node_run("umount", dead.netns, check=False)
    node.node_run("rm", "-f", dead.netns)
    with agent(cri_node, "--sweep-interval", "0.5", "--grace", "1") as running:
        wait_for("the runtime's listing to keep it", lambda: "still lists" in states(running.socket_path, dead.id)["leak"])
        assert node.node_run("test", "-e", f"{leftovers.LIBCNI_CACHE_DIR}/{NETWORK}-{dead.id}-eth0",
                             check=False).returncode == 0
    # Without the runtime's listing (containerd forgot the pod, as containerd#12130 leaves it):
    # netns gone + grace decide, and the attachment is torn down with its cached config.
    sock = node.lab.path("agent2", "agent.sock")
    assert node.holder is not None
    with running_agent(sock, netns=node.lab.node, args=(
            "--pool", "0", "--mount-ns", f"/proc/{node.holder.pid}/ns/mnt", "--bin-dir", node.bin_dir,
            "--sweep-interval", "0.5", "--grace", "1")) as running:
        wait_for("the dead pod to be collected", lambda: node.node_run(
            "test", "-e", f"{leftovers.LIBCNI_CACHE_DIR}/{NETWORK}-{dead.id}-eth0", check=False).returncode != 0)
        with open(running.log_path) as fh:
            print(fh.read()[-4000:])  # shown if what follows fails
        wait_for("the collection to be counted", lambda: "leaks_collected_total 1" in running.metrics())
    assert len(leftovers.ipam_reservations(node.node_run)) == 1
    assert len(leftovers.ifbs(node.node_run)) == 1
    assert answers(cri_node, 18093) and not answers(cri_node, 18092)
    for pod in (dead, live):
        cri.stop_pod(pod.id)  # containerd's own DEL of the collected pod still succeeds
        cri.remove_pod(pod.id)
    assert leftovers.everything(node.node_run) == []
