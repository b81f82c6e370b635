"""Soak in lab namespaces: parallel pod churners through the runner with the reconciler on and the
node's ruleset flushed periodically.

Ends with zero failed pods and zero leaks: no cache entry, address, portmap chain, IFB or
masquerade rule of any pod is left, and no pod was ever refused.  This is the short one (3
churners, about 12 s by default); the issue's run through a real runtime -- 8 churners for 10
minutes through containerd 2.1's CRI -- is ``tests/runtime/test_containerd_soak.py``.  Both read
``CNICHAIN_SOAK_SECONDS`` and ``CNICHAIN_SOAK_CHURNERS``.
"""

from __future__ import annotations

import os
import threading
import time
from typing import Iterator

import pytest

from cnichain.plugins.bandwidth.config import IFB_PREFIX
from cnichain.plugins.portmap import names as portmap_names
from cnichain.podstate.runtime import Attachment
from tests.integration.reconciler_node import LIMITS, Node, masquerade_rules
from tests.polling import wait_for

pytestmark = pytest.mark.integration

SECONDS = float(os.environ.get("CNICHAIN_SOAK_SECONDS", "12"))
CHURNERS = int(os.environ.get("CNICHAIN_SOAK_CHURNERS", "3"))
FLUSH_EVERY = 2.0


@pytest.fixture
def node(lab, make_runtime) -> Iterator[Node]:
    with Node(lab, make_runtime) as n:
        yield n


def test_churn_with_periodic_flushes_ends_with_no_leak_and_no_failed_pod(node, lab):
    failures: list[str] = []
    done = {"pods": 0, "flushes": 0}
    stop = time.monotonic() + SECONDS
    lock = threading.Lock()

    def churn(worker: int) -> None:
        for i in range(100_000):  # bounded by count and by the deadline
            if time.monotonic() >= stop:
                return
            role = f"s{worker}x{i}"
            ns = lab.netns(role)
            att = Attachment(f"soak-{worker}-{i}", ns, "eth0", capability_args={
                "portMappings": [{"hostPort": 20000 + worker, "containerPort": 80, "protocol": "udp"}],
                "bandwidth": dict(LIMITS)})
            try:
                node.runtime.add(node.conf, att)
                node.runtime.delete(node.conf, att)
                with lock:
                    done["pods"] += 1
            except Exception as exc:  # noqa: BLE001 - counted: the test fails on any
                failures.append(f"{role}: {exc}")
                try:
                    node.runtime.delete(node.conf, att)
                except Exception:  # noqa: BLE001
                    pass
            finally:
                lab.delete_netns(ns)

    with node.agent("--sweep-interval", "1", "--grace", "2") as agent:
        threads = [threading.Thread(target=churn, args=(w,)) for w in range(CHURNERS)]
        for t in threads:
            t.start()
        while time.monotonic() < stop:
            time.sleep(FLUSH_EVERY)
            lab.run(lab.node, "nft", "flush", "ruleset")
            done["flushes"] += 1
        for t in threads:
            t.join(120)
        assert not any(t.is_alive() for t in threads)
        cache = os.path.join(node.cache_root, "results")
        wait_for("nothing cached", lambda: not os.listdir(cache) if os.path.isdir(cache) else True)
        time.sleep(2.5)  # one more sweep after the last DEL (a repair racing a DEL is undone by then)
        metrics = agent.metrics()
    print(f"soak: {done['pods']} pods through ADD+DEL by {CHURNERS} churners in {SECONDS:.0f} s, "
          f"{done['flushes']} flushes; reconciler: "
          + ", ".join(line for line in metrics.splitlines() if line.startswith("cnichain_agent_reconcile_repairs")))
    assert failures == []
    assert done["pods"] > 0
    ipam = os.path.join(lab.workdir, "ipam", "rcnet")
    assert os.path.isdir(ipam), f"no IPAM directory {ipam}: the pods were addressed elsewhere"
    assert [n for n in os.listdir(ipam) if n[0].isdigit()] == []
    table = lab.run(lab.node, "nft", "list", "table", portmap_names.FAMILY, portmap_names.TABLE, check=False).stdout
    assert "chain c-" not in table
    assert "id: soak-" not in masquerade_rules(lab)
    assert IFB_PREFIX not in lab.run(lab.node, "ip", "-o", "link", "show", "type", "ifb").stdout
