"""Soak through a real runtime: parallel pod churners on containerd 2.1's CRI, the agent's
reconciler on, and the node's whole ruleset flushed again and again.

Each churner runs pods as the kubelet does -- RunPodSandbox with a TCP and a UDP hostPort and both
bandwidth annotations, then StopPodSandbox and RemovePodSandbox -- one after the other, while one
long-lived pod with a hostPort must keep answering (its rules come back after every flush).  It
ends with zero failed pods and zero leaks: no address reservation, portmap chain or map element,
masquerade rule, IFB, qdisc, host veth, result-cache entry or netns of any pod, and no teardown the
reconciler failed.

``CNICHAIN_SOAK_SECONDS`` and ``CNICHAIN_SOAK_CHURNERS`` set the length and the parallelism
(default: :data:`DEFAULT_SECONDS` with :data:`DEFAULT_CHURNERS`).  Every loop is bounded in count
and in time; nothing asserts how long anything took (pods per minute are printed, not asserted).
"""

from __future__ import annotations

import json
import os
import threading
import time

import pytest

from cnichain.plugins.bridge.rules import MASQ_TABLE, NET_CHAIN_PREFIX, PODS_CHAIN
from tests import polling

from . import leftovers
from .conftest import CriNode
from .cri_client import Port, PodSpec
from .test_containerd_reconcile import CONTAINERD_21, SHAPED, agent, answers, states, web_pod

pytestmark = [pytest.mark.runtime, pytest.mark.integration]

DEFAULT_SECONDS = 600.0
DEFAULT_CHURNERS = 8
SECONDS = float(os.environ.get("CNICHAIN_SOAK_SECONDS", DEFAULT_SECONDS))
CHURNERS = int(os.environ.get("CNICHAIN_SOAK_CHURNERS", DEFAULT_CHURNERS))
# Seconds between `nft flush ruleset` in the node: each costs the steady pod one repair, and 5
# repairs of one thing within 60 s make the reconciler back off (something keeps removing it), so
# the flushes stay well below that budget (a loaded node bunches repairs) and every one of them
# must be repaired.
FLUSH_EVERY = 20.0
MAX_PODS_PER_CHURNER = 10_000  # the count bound next to the deadline
STEADY_PORT = 18095
CHURN_PORT = 21000  # + churner index: one pod per churner at a time holds it


def masquerade_leftovers(cri_node: CriNode) -> list[str]:
    """bridge's per-attachment masquerade state -- owner and subnet map elements, and any rule
    outside its shared dispatch (each belongs to one attachment: none may outlive it)."""
    out = cri_node.node.node_run("nft", "-j", "list", "table", "inet", MASQ_TABLE, check=False)
    if out.returncode != 0:
        return []
    found = []
    for item in json.loads(out.stdout).get("nftables", []):
        rule, owned = item.get("rule"), item.get("map")
        if rule and rule.get("chain") != PODS_CHAIN and not str(rule.get("chain", "")).startswith(NET_CHAIN_PREFIX):
            found.append(f"masquerade rule {rule.get('comment', '')}")
        if owned and owned.get("elem"):
            found += [f"masquerade element {json.dumps(e)}" for e in owned["elem"]]
    return found


def metric(text: str, name: str) -> str:
    """The value of the unlabelled sample ``name`` ("" when absent)."""
    for line in text.splitlines():
        if line.startswith(name + " "):
            return line.split()[1]
    return ""


@pytest.mark.timeout(int(SECONDS) + 900)  # the churn, then at most the bounded waits that follow it
@pytest.mark.parametrize("containerd_release", [CONTAINERD_21], indirect=True, ids=[CONTAINERD_21.label])
def test_pod_churn_under_ruleset_flushes_ends_with_no_leak_and_no_failed_pod(cri_node: CriNode) -> None:
    cri, node = cri_node.cri, cri_node.node
    failures: list[str] = []
    done = [0] * CHURNERS
    flushes = 0
    steady = web_pod(cri_node, "steady", STEADY_PORT)
    with agent(cri_node, "--sweep-interval", "2", "--grace", "10") as running:
        polling.wait_for("the reconciler to know the steady pod",
                         lambda: states(running.socket_path, steady.id).get("portmap") == "ok", 60, 0.1)
        started = time.monotonic()
        stop = started + SECONDS

        def churn(worker: int) -> None:
            for i in range(MAX_PODS_PER_CHURNER):
                if time.monotonic() >= stop or failures:
                    return  # the deadline, or one failed pod already fails the soak: stop churning
                spec = PodSpec(name=f"soak-{worker}-{i}", annotations=dict(SHAPED), ports=[
                    Port(container_port=80, host_port=CHURN_PORT + worker),
                    Port(container_port=53, host_port=CHURN_PORT + worker, protocol="UDP")])
                pod_id = ""
                try:
                    pod = cri.run_pod(spec)
                    pod_id = pod.id
                    if not pod.ip:
                        raise AssertionError("no pod IP")
                    cri.stop_pod(pod_id)
                    cri.remove_pod(pod_id)
                    done[worker] += 1
                except Exception as exc:  # noqa: BLE001 - counted: the test fails on any
                    failures.append(f"{spec.name}: {exc}")
                    if pod_id:
                        for call in (cri.stop_pod, cri.remove_pod):
                            try:
                                call(pod_id)
                            except Exception:  # noqa: BLE001 - the leak check below tells
                                pass

        threads = [threading.Thread(target=churn, args=(w,), daemon=True) for w in range(CHURNERS)]
        for t in threads:
            t.start()
        for _ in range(int(SECONDS / FLUSH_EVERY) + 1):
            if time.monotonic() >= stop or failures:
                break
            time.sleep(min(FLUSH_EVERY, max(0.0, stop - time.monotonic())))
            node.node_run("nft", "flush", "ruleset")
            flushes += 1
        for t in threads:
            t.join(max(60.0, 3 * 120.0))  # a pod in flight: at most its three CRI calls' timeouts
        elapsed = time.monotonic() - started
        assert not any(t.is_alive() for t in threads)
        # The steady pod's hostPort came back after the last flush.
        polling.wait_for("the steady pod's hostPort after the last flush", lambda: answers(cri_node, STEADY_PORT),
                         60, 0.2)
        cri.stop_pod(steady.id)
        cri.remove_pod(steady.id)
        polling.wait_for("no pod state left", lambda: leftovers.everything(node.node_run) == []
                         and masquerade_leftovers(cri_node) == [], 60, 0.5)
        time.sleep(3.0)  # past one more sweep and the watch of a repair that raced a DEL
        metrics = running.metrics()
    pods = sum(done)
    repairs = [line for line in metrics.splitlines() if line.startswith("cnichain_agent_reconcile_repairs_total")]
    print(f"soak: {pods} pods through RunPodSandbox/StopPodSandbox/RemovePodSandbox by {CHURNERS} churners in "
          f"{elapsed:.0f} s ({pods / elapsed * 60:.0f} pods/min), {flushes} flushes; per churner {done}; "
          f"reconciler: {'; '.join(repairs) or 'no repairs'}; backoffs "
          f"{metric(metrics, 'cnichain_agent_reconcile_backoffs_total')}, leaks collected "
          f"{metric(metrics, 'cnichain_agent_reconcile_leaks_collected_total')}, sweeps "
          f"{metric(metrics, 'cnichain_agent_reconcile_sweeps_total')}, last sweep "
          f"{metric(metrics, 'cnichain_agent_reconcile_sweep_duration_seconds')} s")
    assert failures == []
    assert pods >= CHURNERS  # every churner got at least one pod through
    assert leftovers.everything(node.node_run) == []
    assert masquerade_leftovers(cri_node) == []
    assert metric(metrics, "cnichain_agent_reconcile_leak_failures_total") == "0"
    assert metric(metrics, "cnichain_agent_reconcile_backoffs_total") == "0"
    assert not cri.list_pods()
