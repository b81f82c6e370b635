"""State a lost result cache leaves, collected under containerd 2.1 -- and a live pod's never.

A real containerd node runs one live pod (hostPort, shaping).  Next to it, an attachment of the
same network is set up through the chain (bridge with ipMasq, host-local, portmap, bandwidth) for
a container containerd never knew, into a cache directory that is then wiped, and its namespace is
removed: what a pod leaves when the node loses its cache (power loss, containernetworking/cni#1149,
an image that wipes /var/lib/cni at boot) -- a reservation, portmap chains and map elements, an IFB
and a masquerade rule that no cache entry names and that belong to no sandbox CRI lists.

``cnichain gc`` shows it; a reconciler whose CRI answers with a cut stream collects nothing (it
cannot tell); one asking containerd collects it after the grace period, each kind through its
plugin's own code, counts it, and leaves the live pod untouched.
"""

from __future__ import annotations

import json
import os
import socket
import threading

import pytest

from cnichain.agent import running_agent
from cnichain.plugins.bandwidth.config import ifb_name

from . import leftovers
from .conftest import CriNode
from .node import NETWORK, cnichain_cli
from .test_containerd_reconcile import CONTAINERD_21, agent, answers, wait_for, web_pod
from .test_containerd_soak import masquerade_leftovers, metric

pytestmark = [pytest.mark.runtime, pytest.mark.integration]

LOST = "0123456789abcdef" * 4  # a sandbox ID containerd never had


def lost_pod(cri_node: CriNode) -> None:
    """ADD through our chain for ``LOST`` (containerd's network, a throwaway cache), then the cache
    and the namespace vanish without a DEL."""
    node = cri_node.node
    with open(node.conflist_path) as fh:
        conf = json.load(fh)
    conf["plugins"] = [p for p in conf["plugins"] if p["type"] in ("bridge", "portmap", "bandwidth")]
    path = node.lab.path("lost", "lost.conflist")
    with open(path, "w") as fh:
        json.dump(conf, fh)
    cache = node.lab.path("lost", "cache", "x").rsplit("/", 1)[0]
    ns = f"lost-{node.run_id}"
    node.node_run("ip", "netns", "add", ns)
    node.node_run(*cnichain_cli(), "exec", "ADD", path, "--netns", f"/run/netns/{ns}", "--container-id", LOST,
                  "--bin-dir", node.bin_dir, "--cache-dir", cache,
                  "--cap", 'portMappings=[{"hostPort": 18302, "containerPort": 80, "protocol": "tcp"}]',
                  "--cap", 'bandwidth={"ingressRate": 100000000, "ingressBurst": 1000000, '
                           '"egressRate": 100000000, "egressBurst": 1000000}')
    node.node_run("rm", "-rf", cache)
    node.node_run("ip", "netns", "del", ns)


KINDS = ("reservation", "portmap owner", "portmap key", "masquerade rule", "ifb")


def lost_state(cri_node: CriNode) -> dict[str, list[str]]:
    """What the lost pod left, by kind (each kind's findings name the lost pod, none the live one)."""
    run = cri_node.node.node_run
    portmap = leftovers.portmap_held(run, NETWORK, LOST)
    return {
        "reservation": [r for r in leftovers.ipam_reservations(run) if LOST in run("cat", r, check=False).stdout],
        "portmap owner": [e for e in portmap if e.startswith(("owners element", "chain"))],
        "portmap key": [e for e in portmap if e.startswith("map key")],
        "masquerade rule": [m for m in masquerade_leftovers(cri_node) if LOST in m],
        "ifb": [f for f in leftovers.ifbs(run) if ifb_name(NETWORK, LOST) in f],
    }


class CutStream:
    """A CRI socket that accepts and closes every connection: the runtime cannot answer."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.bind(path)
        self.sock.listen(16)
        self.sock.settimeout(0.5)
        self.stop = False
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self) -> None:
        for _ in range(100_000):  # bounded
            if self.stop:
                return
            try:
                conn, _ = self.sock.accept()
            except (socket.timeout, OSError):
                continue
            conn.recv(64)
            conn.close()

    def close(self) -> None:
        self.stop = True
        self.thread.join(5)
        self.sock.close()


@pytest.mark.parametrize("containerd_release", [CONTAINERD_21], indirect=True, ids=[CONTAINERD_21.label])
def test_state_no_cache_entry_names_is_collected_only_when_containerd_does_not_list_it(cri_node: CriNode) -> None:
    node, cri = cri_node.node, cri_node.cri
    live = web_pod(cri_node, "live", 18301)
    lost_pod(cri_node)
    held = lost_state(cri_node)
    # Each kind the chain makes, by name (the default layout makes no IFB: that one must be empty).
    missing = [kind for kind in KINDS if kind != "ifb" and not held[kind]]
    assert missing == [], f"the lost pod left no {missing}: {held}"
    plan = node.node_run(*cnichain_cli(), "gc", "--runtime-endpoint", cri_node.containerd.socket).stdout
    assert f"would collect {NETWORK}/{LOST}" in plan and live.id not in plan.split("would collect")[-1]
    # A runtime that cannot answer: nothing is collected, however long past the grace period.
    cut = CutStream(node.lab.path("cut", "cri.sock"))
    assert node.holder is not None
    try:
        with running_agent(node.lab.path("agent-cut", "agent.sock"), netns=node.lab.node, args=(
                "--pool", "0", "--mount-ns", f"/proc/{node.holder.pid}/ns/mnt", "--bin-dir", node.bin_dir,
                "--runtime-endpoint", cut.path, "--sweep-interval", "0.5", "--grace", "1")) as running:
            wait_for("sweeps well past the grace period", lambda: int(
                metric(running.metrics(), "cnichain_agent_reconcile_sweeps_total") or 0) >= 8, 60)
            assert metric(running.metrics(), "cnichain_agent_reconcile_uncached_found_total") == "0"
        assert lost_state(cri_node) == held
    finally:
        cut.close()
    with agent(cri_node, "--sweep-interval", "0.5", "--grace", "2") as running:
        wait_for("the lost pod's state to be collected", lambda: not any(lost_state(cri_node).values()), 60)
        wait_for("the collection to be counted",
                 lambda: metric(running.metrics(), "cnichain_agent_reconcile_uncached_collected_total") == "1")
        assert metric(running.metrics(), "cnichain_agent_reconcile_uncached_found_total") == "1"
        with open(running.log_path) as fh:
            assert f"collected {NETWORK}/{LOST}" in fh.read()
        assert answers(cri_node, 18301)
        assert len(leftovers.shaping_qdiscs(node.node_run)) == 1  # the live pod's host-veth TBF (its egress TBF is in the pod)
        assert len(leftovers.ipam_reservations(node.node_run)) == 1
        assert any(live.id in m for m in masquerade_leftovers(cri_node))
    cri.stop_pod(live.id)
    cri.remove_pod(live.id)
    assert leftovers.everything(node.node_run) == [] and masquerade_leftovers(cri_node) == []
    assert os.path.exists(node.conflist_path)
