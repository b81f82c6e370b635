"""Workers, and the agent itself, killed at random points of ADD and DEL under load: no pod fails,
nothing is left.

Sixteen pods' chains run at once through an agent while a killer SIGKILLs one of the agent's
workers every fraction of a second (what the kernel's OOM killer does to a process of a cgroup
at its limit) and, once per phase, the agent itself, which is then started again.  A worker killed
mid-request makes its shim run the request cold over whatever the worker left half made; a killed
agent's running workers still answer their shims, and its queued requests and the ones that find
no agent run cold.  Every ADD must succeed (each pod then answers a ping through the bridge), every
DEL too, and the node must be clean afterwards.  The log must show requests whose worker was
killed, or the test did not test what its name says.
"""

from __future__ import annotations

import contextlib
import os
import random
import re
import signal
import threading
import time

import pytest

from cnichain.podstate.runtime import Runtime
from tests.integration.agent_setup import Setup
from tests.integration.footprint import footprint, leftovers
from tests.integration.storm import all_at_once, default_chain, pods

pytestmark = pytest.mark.integration

PODS = 16
MAX_KILLS = 40  # per phase


@pytest.fixture
def setup(tmp_path) -> Setup:
    os.chmod(tmp_path, 0o700)
    return Setup(str(tmp_path))


def _children(pid: int) -> list[int]:
    try:
        with open(f"/proc/{pid}/task/{pid}/children") as fh:
            return [int(p) for p in fh.read().split()]
    except OSError:
        return []


class Killer:
    """Kills random workers of the current agent, and the agent once, until stopped."""

    def __init__(self, stack: contextlib.ExitStack, setup: Setup, args: tuple[str, ...]) -> None:
        self.stack, self.setup, self.args = stack, setup, args
        self.agent = stack.enter_context(setup.agent(*args))
        self.stop = threading.Event()
        self.kills = 0
        self.agent_killed = False
        self.error: BaseException | None = None
        self.rng = random.Random()

    def restart_agent(self) -> None:
        os.kill(self.agent.pid, signal.SIGKILL)
        self.agent.proc.wait(10)
        self.agent = self.stack.enter_context(self.setup.agent(*self.args))

    def run(self) -> None:
        try:
            kill_agent_at = self.rng.randint(3, MAX_KILLS // 2)
            while not self.stop.is_set() and self.kills < MAX_KILLS:
                time.sleep(self.rng.uniform(0.05, 0.3))
                if self.kills == kill_agent_at and not self.agent_killed:
                    self.agent_killed = True
                    self.restart_agent()
                    continue
                workers = _children(self.agent.pid)
                if workers:
                    try:
                        os.kill(self.rng.choice(workers), signal.SIGKILL)
                        self.kills += 1
                    except ProcessLookupError:
                        pass
        except BaseException as exc:  # noqa: BLE001 - reported by the test's thread
            self.error = exc


def _phase(setup: Setup, args: tuple[str, ...], work) -> dict[str, str]:
    with contextlib.ExitStack() as stack:
        killer = Killer(stack, setup, args)
        thread = threading.Thread(target=killer.run, daemon=True)
        thread.start()
        try:
            failed = work()
        finally:
            killer.stop.set()
            thread.join(60)
        assert killer.error is None, killer.error
        assert killer.kills > 0
        return failed


def test_no_failed_pod_and_nothing_left(lab, setup):
    conf = default_chain(lab)
    atts = pods(lab, PODS, "k")
    runtime = Runtime([setup.warm], lab.path("cache", "x").rsplit("/", 1)[0], node_netns=lab.node)
    args = ("--reconcile", "off", "--pool", "2")
    failed = _phase(setup, args, lambda: all_at_once(runtime, atts, lambda att: runtime.add(conf, att)))
    assert failed == {}
    for att in atts:
        lab.run(att.netns, "ping", "-c1", "-W2", "10.22.0.1")
    failed = _phase(setup, args, lambda: all_at_once(runtime, atts, lambda att: runtime.delete(conf, att)))
    assert failed == {}
    assert leftovers(footprint(lab)) == {}
    with open(setup.sock + ".log") as fh:
        log = fh.read()
    assert re.search(r"command=ADD .*outcome=killed", log), "no ADD's worker was killed mid-request"
