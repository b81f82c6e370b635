"""Pods started all at once through containerd 2.1 while the node's firewall and shaping are torn down.

Twenty pods, each with a TCP hostPort serving HTTP and both bandwidth annotations, are run at the
same moment through the CRI while ``nft flush ruleset`` runs every 2 s for 60 s in the node and the
root qdisc of a random host veth is deleted at each flush.  Flushes land everywhere in a pod's
life, including between the chain's ADD and containerd's cache write: the reconciler knows each
pod's expected state from the moment its cache entry exists, so none is left unprotected.  At the
end every hostPort answers and every pod's shaping is in place (the reconciler's back-off against
a remover this persistent ends within its window; the waits are bounded and generous), no pod
failed, nothing of any pod is left once they are removed, and nothing of a removed pod comes back.

Timings are printed, not asserted.
"""

from __future__ import annotations

import random
import threading
import time

import pytest

from tests import polling

from . import leftovers, traffic
from .conftest import CriNode
from .cri_client import Port, PodSpec
from .test_containerd_reconcile import CONTAINERD_21, SHAPED, agent, answers
from .test_containerd_soak import masquerade_leftovers

pytestmark = [pytest.mark.runtime, pytest.mark.integration]

PODS = 20
FLUSH_SECONDS = 60.0
FLUSH_EVERY = 2.0
BASE_PORT = 18200


@pytest.mark.timeout(900)
@pytest.mark.parametrize("containerd_release", [CONTAINERD_21], indirect=True, ids=[CONTAINERD_21.label])
def test_twenty_pods_started_at_once_under_flushes_end_served_shaped_and_leave_nothing(cri_node: CriNode) -> None:
    cri, node = cri_node.cri, cri_node.node
    failures: list[str] = []
    pods: dict[int, object] = {}
    rng = random.Random(29)
    with agent(cri_node, "--sweep-interval", "5", "--grace", "30") as running:
        polling.wait_for("the reconciler's first sweep", lambda: "reconcile_sweeps_total 0" not in running.metrics(),
                         60, 0.2)

        def start(i: int) -> None:
            try:
                pod = cri.run_pod(PodSpec(name=f"churn-{i}", annotations=dict(SHAPED),
                                          ports=[Port(container_port=80, host_port=BASE_PORT + i)]))
                pods[i] = pod
                cri.start_container(pod, "httpd", cri_node.image, ["/bin/httpd"], ["-f", "-p", "80", "-h", "/www"])
                traffic.wait_listening(traffic.pod_argv(pod.pid), 80)
            except Exception as exc:  # noqa: BLE001 - counted: the test fails on any
                failures.append(f"churn-{i}: {exc}")

        started = time.monotonic()
        threads = [threading.Thread(target=start, args=(i,), daemon=True) for i in range(PODS)]
        for t in threads:
            t.start()
        flushes = deleted = 0
        stop = started + FLUSH_SECONDS
        for _ in range(int(FLUSH_SECONDS / FLUSH_EVERY) + 1):  # bounded in count and by the deadline
            if time.monotonic() >= stop:
                break
            node.node_run("nft", "flush", "ruleset")
            flushes += 1
            veths = leftovers.pod_veths(node.node_run)
            if veths:
                dev = rng.choice(veths).split()[-1]
                node.node_run("tc", "qdisc", "del", "dev", dev, "root", check=False)
                deleted += 1
            time.sleep(FLUSH_EVERY)
        for t in threads:
            t.join(300)
        assert not any(t.is_alive() for t in threads)
        assert failures == []
        assert len(pods) == PODS
        last_flush = time.monotonic()
        # Every hostPort answers again and every pod is shaped (its host veth's TBF; egress is shaped in the pod).
        polling.wait_for("every hostPort to answer", lambda: all(answers(cri_node, BASE_PORT + i) for i in range(PODS)),
                         240, 0.5)
        polling.wait_for("every pod's shaping", lambda: len(leftovers.shaping_qdiscs(node.node_run)) == PODS,
                         240, 0.5)
        settled = time.monotonic() - last_flush
        metrics = running.metrics()
        for pod in pods.values():
            cri.stop_pod(pod.id)  # type: ignore[attr-defined]
            cri.remove_pod(pod.id)  # type: ignore[attr-defined]
        polling.wait_for("nothing of any pod left", lambda: leftovers.everything(node.node_run) == []
                         and masquerade_leftovers(cri_node) == [], 60, 0.5)
        time.sleep(7.0)  # past one more sweep and the watch of any repair that raced a DEL
        back = leftovers.everything(node.node_run) + masquerade_leftovers(cri_node)
    repairs = [line for line in metrics.splitlines() if line.startswith("cnichain_agent_reconcile_repairs_total")]
    print(f"churn: {PODS} pods at once, {flushes} flushes and {deleted} qdisc deletions in {FLUSH_SECONDS:.0f} s; "
          f"all served and shaped {settled:.1f} s after the last flush; {'; '.join(repairs)}")
    assert back == []
    assert not cri.list_pods()
