"""A node that starts 110 pods at once through containerd 2.1, the agent under its DaemonSet limits.

``maxPods`` is 110 by default, and a kubelet starts every pod of a node at once after a reboot or a
drain.  Here 110 RunPodSandbox calls run in parallel, each pod with a hostPort and both bandwidth
annotations (a different rate each way), through the shims of the node's bin dir forwarding to an
agent that runs in a memory cgroup of the DaemonSet's limit for its container (512 MiB) with its
CPU quota (2 CPUs).  Every pod
must be ready with an IP, every hostPort must answer from the client namespace (a listener opened
in each pod's network namespace answers ``pong``), every pod must be torn down (StopPodSandbox and
RemovePodSandbox, all in parallel too), and nothing may be left: no reservation, rule, IFB, qdisc,
veth, cache entry or netns.  Every pod must be shaped as bandwidth's default layout puts it (a root
TBF at the ingress rate on its host veth, one at the egress rate on its eth0, no IFB), and one
sample pod's rates are measured both ways.  The agent must not have been OOM-killed, nor any of
its workers, its peak must lie above its idle footprint and below half its limit, and every
request must have run warm: none sent cold or failed by the agent's counters, and none run cold
by the shims' own record (a shim that gave up on the agent is never counted by it).  The same
pods then run without the agent (cold, the same run) and must pass the same checks; wall times
and pods per second of both are printed, never asserted.
"""

from __future__ import annotations

import concurrent.futures
import json
import selectors
import subprocess
import socket
import threading
import time

import pytest

from cnichain.agent import running_agent
from cnichain.common import netns as netns_mod
from cnichain.node import launchers
from cnichain.tools.memcg import MemCgroup
from tests.coldruns import noted

from . import leftovers, traffic
from .conftest import CriNode
from .cri_client import Port, PodSpec
from .node import NODE_IP
from .test_containerd_reconcile import CONTAINERD_21

pytestmark = [pytest.mark.runtime, pytest.mark.integration]

PODS = 110
LIMIT = 512 << 20  # deploy/: the agent container's memory limit and CPU quota
CPUS = 2.0
BASE_PORT = 23000
INGRESS = 20_000_000  # bits/s into each pod ...
EGRESS = 10_000_000  # ... and out of it: different, so that swapped directions cannot pass
SHAPED = {"kubernetes.io/ingress-bandwidth": "20M", "kubernetes.io/egress-bandwidth": "10M"}


def install_shims(cri_node: CriNode, socket_path: str) -> None:
    """The node's plugins again, their shims pointing at ``socket_path`` (containerd passes no
    CNICHAIN_AGENT_SOCKET: the socket is the one the installer baked in)."""
    report = launchers.install(cri_node.node.bin_dir, agent_socket=socket_path)
    assert not report.refused, report.refused


class Listeners:
    """One TCP listener on port 80 in each pod's network namespace, all served by one thread."""

    def __init__(self) -> None:
        self.sel = selectors.DefaultSelector()
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.socks: list[socket.socket] = []

    def add(self, pid: int) -> None:
        with netns_mod.entered(f"/proc/{pid}/ns/net"):
            sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(("0.0.0.0", 80))
        sock.listen(16)
        sock.setblocking(False)
        self.socks.append(sock)
        self.sel.register(sock, selectors.EVENT_READ)

    def _serve(self) -> None:
        while not self.stop.is_set():
            for key, _ in self.sel.select(0.2):
                try:
                    conn, _ = key.fileobj.accept()  # type: ignore[union-attr]
                except OSError:
                    continue
                try:
                    conn.settimeout(2)
                    conn.sendall(b"pong\n")
                except OSError:
                    pass
                finally:
                    conn.close()

    def __enter__(self) -> "Listeners":
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        self.thread.join(10)
        for sock in self.socks:
            sock.close()


def _in_pod(pid: int, *argv: str) -> list[dict]:
    """``ip -j``/``tc -j`` output of ``argv`` run in the network namespace of pod process ``pid``."""
    proc = subprocess.run(traffic.pod_argv(pid, *argv), capture_output=True, text=True, check=True, timeout=60)
    return json.loads(proc.stdout or "[]")


def root_tbf_rate(qdiscs: list[dict], dev: str) -> int:
    """The rate (bytes/s, as tc prints it) of ``dev``'s root TBF in ``tc -j qdisc show``; 0: none."""
    for q in qdiscs:
        if q.get("dev") == dev and q.get("kind") == "tbf" and q.get("root"):
            return int(q["options"]["rate"])
    return 0


def shaping_failures(cri_node: CriNode, pods: list) -> list[str]:
    """Each pod against bandwidth's default (split) layout: its host veth (eth0's peer, found by
    ifindex) has a root TBF at the ingress rate, its eth0 one at the egress rate, and no IFB exists."""
    node = cri_node.node
    host_links = {link["ifindex"]: link["ifname"]
                  for link in json.loads(node.node_run("ip", "-j", "link", "show").stdout or "[]")}
    host_qdiscs = json.loads(node.node_run("tc", "-j", "qdisc", "show").stdout or "[]")
    failures = [f"an IFB exists: {name}" for name in leftovers.ifbs(node.node_run)]
    for i, pod in pods:
        eth0 = _in_pod(pod.pid, "ip", "-j", "link", "show", "dev", "eth0")
        host_veth = host_links.get(eth0[0].get("link_index", -1), "") if eth0 else ""
        ingress = root_tbf_rate(host_qdiscs, host_veth)
        egress = root_tbf_rate(_in_pod(pod.pid, "tc", "-j", "qdisc", "show"), "eth0")  # "show dev" omits the dev
        if (ingress * 8, egress * 8) != (INGRESS, EGRESS):
            failures.append(f"pod {i}: root TBF rates {ingress * 8} bit/s on host veth {host_veth or '?'} and "
                            f"{egress * 8} bit/s on eth0, want {INGRESS} and {EGRESS}")
    return failures


def sample_rates(cri_node: CriNode, pod) -> list[str]:
    """iperf3 both ways between the client namespace and one pod: each direction at its own rate."""
    in_pod, client = traffic.pod_argv(pod.pid), cri_node.node.client_argv()
    failures = []
    for reverse, want, what in ((False, INGRESS, "ingress"), (True, EGRESS, "egress")):
        ok, rates = traffic.rate_within(
            lambda reverse=reverse: traffic.iperf_rate(in_pod, client, pod.ip, reverse=reverse, seconds=4), want)
        print(f"node scale: sample pod {what} {[round(r) for r in rates]} bit/s, want {want}")
        if not ok:
            failures.append(f"sample pod {what} {rates} bit/s, want {want} +-10%")
    return failures


def storm(cri_node: CriNode, tag: str, measure: bool = False) -> tuple[float, float, list[str]]:
    """110 pods at once, each hostPort and shaping checked (``measure``: one pod's rates measured
    too), all torn down at once: (up s, down s, failures)."""
    cri = cri_node.cri
    failures: list[str] = []

    def up(i: int):
        return cri.run_pod(PodSpec(name=f"scale-{tag}-{i}", annotations=dict(SHAPED),
                                   ports=[Port(container_port=80, host_port=BASE_PORT + i)]))

    started = time.monotonic()
    pods = []
    with concurrent.futures.ThreadPoolExecutor(max_workers=PODS) as pool:
        for i, fut in enumerate([pool.submit(up, i) for i in range(PODS)]):
            try:
                pod = fut.result(timeout=600)
                pods.append((i, pod))
                if not pod.ip:
                    failures.append(f"pod {i}: no IP")
            except Exception as exc:  # noqa: BLE001 - every failed pod is reported
                failures.append(f"pod {i}: {exc}")
    up_seconds = time.monotonic() - started
    with Listeners() as listeners:
        for _, pod in pods:
            listeners.add(pod.pid)
        for i, _pod in pods:
            got = traffic.tcp_request(cri_node.node.client_argv(), NODE_IP, BASE_PORT + i, b"ping\n")
            if b"pong" not in got:
                failures.append(f"pod {i}: hostPort {BASE_PORT + i} did not answer ({got[:80]!r})")
    failures += shaping_failures(cri_node, pods)
    if measure and pods:
        failures += sample_rates(cri_node, pods[0][1])
    ready = {p.id for p in cri.list_pods() if p.state == 0}  # SANDBOX_READY
    failures += [f"pod {i}: not ready" for i, pod in pods if pod.id not in ready]

    def down(pod) -> None:
        cri.stop_pod(pod.id)
        cri.remove_pod(pod.id)

    started = time.monotonic()
    with concurrent.futures.ThreadPoolExecutor(max_workers=PODS) as pool:
        for (i, _), fut in zip(pods, [pool.submit(down, pod) for _, pod in pods]):
            try:
                fut.result(timeout=600)
            except Exception as exc:  # noqa: BLE001
                failures.append(f"pod {i} teardown: {exc}")
    return up_seconds, time.monotonic() - started, failures


@pytest.mark.timeout(1800)
@pytest.mark.parametrize("containerd_release", [CONTAINERD_21], indirect=True, ids=[CONTAINERD_21.label])
def test_110_pods_at_once_every_one_ready_and_answering_and_nothing_left(cri_node: CriNode) -> None:
    node = cri_node.node
    assert node.holder is not None
    sock = node.lab.path("agent", "agent.sock")
    install_shims(cri_node, sock)
    with MemCgroup(LIMIT, cpus=CPUS) as cg, noted(node.bin_dir, node.lab.path("cold-runs.log")) as cold:
        with running_agent(sock, netns=node.lab.node, preexec=cg.join, args=(
                "--mount-ns", f"/proc/{node.holder.pid}/ns/mnt", "--bin-dir", node.bin_dir,
                "--runtime-endpoint", cri_node.containerd.socket, "--queue-wait", "120")) as agent:
            idle = cg.usage()  # the agent and its pool before any pod: the storm must charge more
            warm_up, warm_down, failures = storm(cri_node, "warm", measure=True)
            assert failures == []
            assert leftovers.everything(node.node_run) == []
            metrics = agent.metrics()
            assert agent.proc.poll() is None  # the agent itself was not killed
        oom_kills, peak = cg.oom_kills(), cg.peak()
        cold_runs = cold.runs()
    install_shims(cri_node, "")  # the same pods cold: the same checks, and the printed comparison
    cold_up, cold_down, cold_failures = storm(cri_node, "cold")
    print(f"node scale: {PODS} pods at once through containerd 2.1: warm (agent in {LIMIT >> 20} MiB, "
          f"{CPUS:g} CPUs) up {warm_up:.1f} s down {warm_down:.1f} s ({PODS / warm_up:.1f} / "
          f"{PODS / warm_down:.1f} pods/s), agent idle {idle >> 20} MiB peak {peak >> 20} MiB, OOM kills {oom_kills}; "
          f"cold up {cold_up:.1f} s down {cold_down:.1f} s ({len(cold_failures)} failed)")
    assert cold_failures == []
    assert cold_runs == [], f"{len(cold_runs)} plugin execs ran cold (type, command): {cold_runs[:20]}"
    assert oom_kills == 0
    assert idle < peak < LIMIT // 2, f"idle {idle >> 20} MiB, peak {peak >> 20} MiB"
    outcomes = [line for line in metrics.splitlines() if line.startswith("cnichain_agent_requests_total{")]
    assert outcomes and all('outcome="ok"' in line for line in outcomes), outcomes
    assert [line for line in metrics.splitlines() if line.startswith("cnichain_agent_refused_total{")] == []
    assert leftovers.everything(node.node_run) == []
    assert not cri_node.cri.list_pods()
