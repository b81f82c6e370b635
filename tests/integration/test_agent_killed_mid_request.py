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


def _netns(pid: int) -> str:
    try:
        return os.readlink(f"/proc/{pid}/ns/net")
    except OSError:
        return ""


def _busy(agent_pid: int, workers: list[int]) -> list[int]:
    """The workers inside a caller's network namespace: serving a request right now (a worker
    enters the shim's namespaces for a request and goes back home before it is idle again)."""
    home = _netns(agent_pid)
    return [w for w in workers if _netns(w) not in ("", home)]


class Killer:
    """Kills random workers of the current agent, and the agent once, until stopped."""

    def __init__(self, stack: contextlib.ExitStack, setup: Setup, args: tuple[str, ...]) -> None:
        self.stack, self.setup, self.args = stack, setup, args
        self.agent = stack.enter_context(setup.agent(*args))
        self.stop = threading.Event()
        self.kills = 0
        self.killed_pids: list[int] = []  # the workers this killer's SIGKILL reached
        self.agent_killed = False  # set only once the agent is seen dead of that SIGKILL
        self.error: BaseException | None = None
        self.rng = random.Random()

    def restart_agent(self) -> None:
        os.kill(self.agent.pid, signal.SIGKILL)
        code = self.agent.proc.wait(10)
        assert code == -signal.SIGKILL, f"the agent exited {code}, not by the killer's SIGKILL"
        self.agent_killed = True
        self.agent = self.stack.enter_context(self.setup.agent(*self.args))

    def run(self) -> None:
        try:
            # Early in the phase, while its requests are still running (asserted by the caller).
            kill_agent_at = self.rng.randint(1, 2)
            idle_kill_at = time.monotonic() + self.rng.uniform(0.05, 0.3)
            while not self.stop.is_set() and self.kills < MAX_KILLS:
                # Polled often: a DEL's worker is busy for milliseconds, and it is the busy ones
                # this test is about (an idle one now and then too, as the OOM killer picks).
                time.sleep(self.rng.uniform(0.005, 0.03))
                if self.kills >= kill_agent_at and not self.agent_killed:
                    self.restart_agent()
                    continue
                workers = _children(self.agent.pid)
                busy = _busy(self.agent.pid, workers)
                if not busy and (not workers or time.monotonic() < idle_kill_at):
                    continue
                idle_kill_at = time.monotonic() + self.rng.uniform(0.05, 0.3)
                victim = self.rng.choice(busy or workers)
                try:
                    os.kill(victim, signal.SIGKILL)
                    self.kills += 1
                    self.killed_pids.append(victim)
                except ProcessLookupError:
                    pass
        except BaseException as exc:  # noqa: BLE001 - reported by the test's thread
            self.error = exc


def _busy_kills(log: str, command: str, pids: list[int]) -> set[int]:
    """Which of ``pids`` the agent logged as the worker of a ``command`` request that ended
    "killed": kills that landed on a busy worker mid-request, not on an idle one in the pool."""
    logged = {int(m.group(1)) for m in re.finditer(
        rf"command={command} .*outcome=killed .*worker=(\d+)", log)}
    return logged & set(pids)


def _phase(setup: Setup, args: tuple[str, ...], work) -> tuple[dict[str, str], Killer]:
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
        assert killer.agent_killed, "the phase ended before the agent itself was killed"
        return failed, killer


def test_no_failed_pod_and_nothing_left(lab, setup):
    conf = default_chain(lab)
    atts = pods(lab, PODS, "k")
    runtime = Runtime([setup.warm], lab.path("cache", "x").rsplit("/", 1)[0], node_netns=lab.node)
    args = ("--reconcile", "off", "--pool", "2")
    failed, adds = _phase(setup, args, lambda: all_at_once(runtime, atts, lambda att: runtime.add(conf, att)))
    assert failed == {}, failed
    for att in atts:
        lab.run(att.netns, "ping", "-c1", "-W2", "10.22.0.1")
    failed, dels = _phase(setup, args, lambda: all_at_once(runtime, atts, lambda att: runtime.delete(conf, att)))
    assert failed == {}, failed
    assert leftovers(footprint(lab)) == {}
    with open(setup.sock + ".log") as fh:
        log = fh.read()
    busy_adds = _busy_kills(log, "ADD", adds.killed_pids)
    busy_dels = _busy_kills(log, "DEL", dels.killed_pids)
    print(f"killed mid-request: {len(busy_adds)} of {adds.kills} ADD-phase kills, "
          f"{len(busy_dels)} of {dels.kills} DEL-phase kills hit a busy worker")
    assert busy_adds, f"none of the ADD phase's kills {adds.killed_pids} hit a worker serving an ADD"
    assert busy_dels, f"none of the DEL phase's kills {dels.killed_pids} hit a worker serving a DEL"
