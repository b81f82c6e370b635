"""The agent's reconciler on a node run by a real containerd (CRI), pods as the kubelet describes them.

The agent runs in the node's network namespace and its reconciler in the node's private mount
namespace (``--mount-ns``, as the DaemonSet sets it to the host's), so it reads containerd's own
libcni result cache, and asks containerd's CRI ``ListPodSandbox`` (``--runtime-endpoint``).
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from typing import Callable

import pytest

from cnichain.agent import running_agent
from cnichain.agent.reconcile import status as rstatus
from cnichain.agent.reconcile.settings import status_path

from tests import polling

from . import leftovers, traffic
from .conftest import CriNode
from .containerd import RELEASES
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
        wait_for("shaping to return", lambda: len(leftovers.shaping_qdiscs(node.node_run)) == 1)  # the host veth's TBF
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
    assert len(leftovers.shaping_qdiscs(node.node_run)) == 1  # the live pod's host-veth TBF
    assert answers(cri_node, 18093) and not answers(cri_node, 18092)
    for pod in (dead, live):
        cri.stop_pod(pod.id)  # containerd's own DEL of the collected pod still succeeds
        cri.remove_pod(pod.id)
    assert leftovers.everything(node.node_run) == []


# -- a UDP flow follows its hostPort from one pod to the next (containerd 2.1) -----------------------

CONTAINERD_21 = next(r for r in RELEASES if r.label == "containerd-2.1")

# One client socket, one source port, a datagram every 50 ms: the same 5-tuple throughout, so the
# node keeps a single conntrack entry alive for it (a UDP entry lives as long as traffic refreshes
# it).  Each answer is printed as a line.  Bounded by its own deadline.
UDP_FLOW = """
import socket, sys, time
dst, sport, limit = (sys.argv[1], int(sys.argv[2])), int(sys.argv[3]), float(sys.argv[4])
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("0.0.0.0", sport))
s.settimeout(0.05)
end = time.monotonic() + limit
while time.monotonic() < end:
    s.sendto(b"ping\\n", dst)
    try:
        while True:
            print(s.recvfrom(512)[0].decode(errors="replace").strip(), flush=True)
    except (socket.timeout, OSError):
        pass
"""


class UdpFlow:
    """The client's continuous flow to ``NODE_IP:port`` and the answers it got, in order."""

    def __init__(self, cri_node: CriNode, port: int, sport: int, limit: float = 300.0) -> None:
        self.proc = subprocess.Popen(cri_node.node.client_argv(sys.executable, "-c", UDP_FLOW, NODE_IP, str(port),
                                                               str(sport), str(limit)),
                                     stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                                     text=True)
        self.answers: list[str] = []
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.answers.append(line.strip())

    def answered(self, text: str) -> bool:
        """The latest answers (more than one: not a straggler) all came from ``text``."""
        recent = self.answers[-3:]
        return len(recent) == 3 and all(a == text for a in recent)

    def close(self) -> None:
        traffic.stop(self.proc)
        self.reader.join(10)


def udp_pod(cri_node: CriNode, name: str, port: int) -> tuple[object, subprocess.Popen]:
    """A pod with UDP hostPort ``port`` -> 53 (as the kubelet describes it) and, in its network
    namespace, a UDP server that answers with the pod's name."""
    pod = cri_node.cri.run_pod(PodSpec(name=name, ports=[Port(container_port=53, host_port=port, protocol="UDP")]))
    in_pod = traffic.pod_argv(pod.pid)
    server = subprocess.Popen([*in_pod, "socat", "UDP-RECVFROM:53,fork,reuseaddr", f"SYSTEM:echo {name}"],
                              stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    traffic.wait_listening(in_pod, 53, "udp")
    return pod, server


def conntrack_sources(cri_node: CriNode, port: int) -> str:
    """The node's UDP conntrack entries to ``port`` (their reply sources: the pod DNATed to)."""
    return cri_node.node.node_run("conntrack", "-L", "-p", "udp", "--dport", str(port), check=False).stdout


@pytest.mark.parametrize("containerd_release", [CONTAINERD_21], indirect=True, ids=[CONTAINERD_21.label])
def test_a_udp_flow_follows_its_host_port_from_the_deleted_pod_to_the_new_one(cri_node: CriNode) -> None:
    cri, port = cri_node.cri, 18094
    with agent(cri_node, "--sweep-interval", "1", "--grace", "600") as running:
        old, old_server = udp_pod(cri_node, "udp-old", port)
        flow = UdpFlow(cri_node, port, sport=40494)
        try:
            wait_for("the flow to reach the old pod", lambda: flow.answered("udp-old"))
            assert f"src={old.ip} " in conntrack_sources(cri_node, port)  # DNATed to the old pod
            wait_for("the reconciler to know the old pod", lambda: states(running.socket_path, old.id).get("portmap") == "ok")
            traffic.stop(old_server)
            cri.stop_pod(old.id)
            cri.remove_pod(old.id)
            # DEL flushed the entries DNATed to the deleted pod, and the reconciler put nothing back.
            assert f"src={old.ip} " not in conntrack_sources(cri_node, port)
            new, new_server = udp_pod(cri_node, "udp-new", port)
            try:
                assert new.ip != old.ip  # else a stale entry would reach it by luck
                # The same 5-tuple, sent all along: ADD flushed the entry the gap left, so the flow
                # follows at once instead of blackholing until the entry times out.
                wait_for("the same flow to reach the new pod", lambda: flow.answered("udp-new"))
                entries = conntrack_sources(cri_node, port)
                assert f"src={new.ip} " in entries and f"src={old.ip} " not in entries
            finally:
                traffic.stop(new_server)
                cri.stop_pod(new.id)
                cri.remove_pod(new.id)
        finally:
            flow.close()
        assert 'outcome="ok"' not in running.metrics()  # nothing needed repairing
    assert leftovers.everything(cri_node.node.node_run) == []
