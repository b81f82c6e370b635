"""The agent's queue: requests beyond its capacity wait for a warm worker instead of forking more
or going cold, and one that waited its bound runs cold (nothing of it ran in the agent)."""

from __future__ import annotations

import os

import pytest

from tests.integration.agent_setup import Setup, finish, probe_conf, start, wait_for

pytestmark = pytest.mark.integration


@pytest.fixture
def setup(tmp_path) -> Setup:
    os.chmod(tmp_path, 0o700)
    return Setup(str(tmp_path))


def test_requests_beyond_the_capacity_wait_and_run_warm_one_after_another(setup):
    with setup.agent("--max-workers", "1", "--pool", "1", "--queue-wait", "120") as agent:
        wait_for(lambda: 'cnichain_agent_workers{state="idle"} 1' in agent.metrics(), timeout=120)
        procs = [start(setup.warm, "probe", "ADD", probe_conf(setup, sleep=1.0), CNI_CONTAINERID=f"q{i}")
                 for i in range(3)]
        assert [finish(p)[0] for p in procs] == [0, 0, 0]
        text = agent.metrics()
    recs = [r for r in setup.records() if r["phase"] == "start"]
    assert len(recs) == 3 and len({r["pid"] for r in recs}) == 1  # one worker, one request at a time
    assert all(r["pid"] not in {p.pid for p in procs} for r in recs)  # none ran cold
    assert "cnichain_agent_capacity_workers 1" in text
    assert "cnichain_agent_queue 0" in text
    assert 'reason="queue wait"' not in text


def test_a_request_that_waited_its_bound_runs_cold(setup):
    with setup.agent("--max-workers", "1", "--pool", "1", "--queue-wait", "0.5") as agent:
        wait_for(lambda: 'cnichain_agent_workers{state="idle"} 1' in agent.metrics(), timeout=120)
        first = start(setup.warm, "probe", "ADD", probe_conf(setup, sleep=4.0), CNI_CONTAINERID="long")
        wait_for(lambda: 'cnichain_agent_workers{state="busy"} 1' in agent.metrics(), timeout=60)
        second = start(setup.warm, "probe", "ADD", probe_conf(setup), CNI_CONTAINERID="waited")
        assert finish(second)[0] == 0
        assert finish(first)[0] == 0
        text = agent.metrics()
    by_container = {r["container"]: r for r in setup.records() if r["phase"] == "start"}
    assert by_container["waited"]["pid"] == second.pid  # its shim ran it cold
    assert by_container["long"]["pid"] != first.pid  # the first ran warm
    assert 'cnichain_agent_refused_total{reason="queue wait"} 1' in text
