"""The agent inside its own memory limit with many pods at once: the pool stays within its budget.

The agent runs in a memory cgroup set to the DaemonSet's limit for its container (512 MiB; its
workers are charged to it too) with a 2-CPU quota, and 48 pods' chains start at once -- far more
requests than the budget's workers, so most of them wait in the agent's queue.  Every pod's ADD
succeeds warm -- no request is sent back cold, and no shim ran its plugin cold (the cold-run
record of the callers' side, which sees a shim that gave up on a connect or acknowledgement
timeout the agent never counted) --, the kernel's OOM killer takes nothing, the cgroup's
peak stays below the share of the limit the pool is planned in (:data:`budget.BUDGET_SHARE`), the
queue drains, and the DELs, all at once too, leave nothing behind.
"""

from __future__ import annotations

import os

import pytest

from cnichain.agent import budget
from cnichain.tools.memcg import MemCgroup, leftover_cgroups
from cnichain.podstate.runtime import Runtime
from tests.coldruns import noted
from tests.integration.agent_setup import Setup, settled
from tests.integration.footprint import footprint, leftovers
from tests.integration.storm import all_at_once, default_chain, metric, pods, series

pytestmark = pytest.mark.integration

LIMIT = 512 << 20  # deploy/: the agent container's memory limit
PODS = 48


@pytest.fixture
def setup(tmp_path) -> Setup:
    os.chmod(tmp_path, 0o700)
    return Setup(str(tmp_path))


def test_48_pods_at_once_within_the_budget(lab, setup):
    conf = default_chain(lab)
    atts = pods(lab, PODS)
    runtime = Runtime([setup.warm], lab.path("cache", "x").rsplit("/", 1)[0], node_netns=lab.node)
    with MemCgroup(LIMIT, cpus=2) as cg, noted(setup.warm, os.path.join(setup.root, "cold.log")) as cold:
        # A long queue wait: on a loaded machine no request may be sent cold for waiting.
        with setup.agent("--queue-wait", "120", "--reconcile", "off", preexec=cg.join) as agent:
            capacity = metric(agent.metrics(), "cnichain_agent_capacity_workers")
            assert 0 < capacity < PODS
            idle = cg.usage()  # the agent and its warm pool, before any pod: what the storm adds to
            failed = all_at_once(runtime, atts, lambda att: runtime.add(conf, att))
            assert failed == {}
            added = agent.metrics()
            settled(agent)
            failed = all_at_once(runtime, atts, lambda att: runtime.delete(conf, att))
            assert failed == {}
            done = agent.metrics()
            assert cg.oom_kills() == 0
            peak = cg.peak()
        assert cg.oom_kills() == 0
        cold_runs = cold.runs()
    assert not leftover_cgroups()
    assert cold_runs == [], f"{len(cold_runs)} plugin execs ran cold (type, command): {cold_runs[:20]}"
    assert idle < peak < LIMIT * budget.BUDGET_SHARE, f"idle {idle >> 20} MiB, peak {peak >> 20} MiB"
    assert metric(added, "cnichain_agent_queued_total") > 0  # the storm did queue
    assert metric(done, "cnichain_agent_queue") == 0  # ... and the queue drained
    assert series(done, "cnichain_agent_refused_total{") == []  # nothing sent cold
    outcomes = series(done, "cnichain_agent_requests_total{")
    assert outcomes and all('outcome="ok"' in line for line in outcomes), outcomes
    assert leftovers(footprint(lab)) == {}
