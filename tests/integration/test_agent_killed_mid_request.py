"""Workers, and the agent itself, killed at random points of ADD and DEL under load: no pod fails,
nothing is left.

Sixteen pods' chains run at once through an agent while a killer SIGKILLs one of the agent's
busy workers (one serving a request, never an idle one) every fraction of a second (what the
kernel's OOM killer does to a process of a cgroup at its limit) and, once per phase while a worker
is busy, the agent itself, which is then started again.  A worker killed
mid-request makes its shim run the request cold over whatever the worker left half made; a killed
agent's running workers still answer their shims, and its queued requests and the ones that find
no agent run cold.  Every ADD must succeed (each pod then answers a ping through the bridge), every
DEL too, and the node must be clean afterwards.  Each phase must have killed the agent (its exit
by SIGKILL) and at least one worker, and the agent's log must name every killed worker as the
worker of a request of that phase that ended "killed" -- an ADD in the first phase, a DEL in the
second -- or the test did not test what its name says.
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


def _netns(pid: int) -> int | None:
    try:
        return os.stat(f"/proc/{pid}/ns/net").st_ino
    except OSError:
        return None


def _wait_stopped(pid: int) -> bool:
    """Whether ``pid`` (sent SIGSTOP) is stopped, polled a bounded number of times."""
    for _ in range(400):  # at most about 2 s
        try:
            with open(f"/proc/{pid}/stat") as fh:
                state = fh.read().rsplit(")", 1)[1].split()[0]
        except OSError:
            return False
        if state in ("T", "t"):
            return True
        time.sleep(0.005)
    return False


def _busy(pid: int, home: int | None) -> bool:
    """A worker serving a request is inside its caller's network namespace (the lab's node), not
    the agent's: a worker enters the request's namespaces first and reports DONE only after it is
    back home (agent/pool.py), so one stopped away from home has not finished its request."""
    ns = _netns(pid)
    return ns is not None and home is not None and ns != home


def _logged_kill(log: str, pid: int) -> str:
    """The command of the request the agent logged as killed on worker ``pid`` ("" when none)."""
    found = re.search(rf"command=(\S+) .*outcome=killed .*worker={pid}(?:/pooled)?(?:\s|$)", log, re.M)
    return found.group(1) if found else ""


def _log_size(setup: Setup) -> int:
    try:
        return os.path.getsize(setup.sock + ".log")
    except FileNotFoundError:
        return 0


def _read_log(setup: Setup, offset: int) -> str:
    """The agent's log from ``offset`` on (one phase's part: a pid of the other could recur)."""
    with open(setup.sock + ".log", "rb") as fh:
        fh.seek(offset)
        return fh.read().decode("utf-8", "replace")


class Killer:
    """Kills random busy workers of the current agent, and once the agent itself, until stopped.

    A candidate worker is stopped (SIGSTOP) first, so it cannot finish while it is looked at; it
    is killed only if it is away from home, that is mid-request, and let go (SIGCONT) otherwise.
    The agent is killed while one of its workers is busy, after every worker kill so far is in its
    log (a kill the dead agent could not log would prove nothing)."""

    def __init__(self, stack: contextlib.ExitStack, setup: Setup, args: tuple[str, ...]) -> None:
        self.stack, self.setup, self.args = stack, setup, args
        self.log_offset = _log_size(setup)
        self.agent = stack.enter_context(setup.agent(*args))
        self.stop = threading.Event()
        self.killed: list[int] = []  # workers SIGKILLed while stopped mid-request
        self.idle_spared = 0  # candidates found at home, let go
        self.agent_status: int | None = None  # the killed agent's wait status (as Popen reports it)
        self.agent_busy_when_killed = False
        self.error: BaseException | None = None
        self.rng = random.Random()

    def _kill_a_busy_worker(self) -> None:
        home = _netns(self.agent.pid)
        workers = _children(self.agent.pid)
        self.rng.shuffle(workers)
        for pid in workers:
            try:
                os.kill(pid, signal.SIGSTOP)
            except ProcessLookupError:
                continue
            killed = False
            try:
                if _wait_stopped(pid) and _busy(pid, home):
                    os.kill(pid, signal.SIGKILL)
                    killed = True
                    self.killed.append(pid)
                    return
                self.idle_spared += 1
            finally:
                if not killed:
                    with contextlib.suppress(ProcessLookupError):
                        os.kill(pid, signal.SIGCONT)

    def _kill_the_agent(self) -> bool:
        home = _netns(self.agent.pid)
        if not any(_busy(pid, home) for pid in _children(self.agent.pid)):
            return False
        for _ in range(200):  # bounded: about 10 s for the agent to log its workers' kills
            log = _read_log(self.setup, self.log_offset)
            if all(_logged_kill(log, pid) for pid in self.killed):
                break
            time.sleep(0.05)
        os.kill(self.agent.pid, signal.SIGKILL)
        self.agent_status = self.agent.proc.wait(10)
        self.agent_busy_when_killed = True
        self.agent = self.stack.enter_context(self.setup.agent(*self.args))
        return True

    def run(self) -> None:
        try:
            kill_agent_after = self.rng.randint(1, 3)  # worker kills before the agent's
            for _ in range(MAX_KILLS * 100):  # bounded in count; each round sleeps
                if self.stop.is_set() or len(self.killed) >= MAX_KILLS:
                    return
                time.sleep(self.rng.uniform(0.02, 0.1))
                if self.agent_status is None and len(self.killed) >= kill_agent_after and self._kill_the_agent():
                    continue
                self._kill_a_busy_worker()
        except BaseException as exc:  # noqa: BLE001 - reported by the test's thread
            self.error = exc


def _phase(setup: Setup, args: tuple[str, ...], command: str, work) -> dict[str, str]:
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
        assert killer.agent_status == -signal.SIGKILL and killer.agent_busy_when_killed, \
            f"the agent was not killed mid-request during the {command} phase (status {killer.agent_status})"
        assert killer.killed, f"no busy worker was killed during the {command} phase"
        log = _read_log(setup, killer.log_offset)
        logged = {pid: _logged_kill(log, pid) for pid in killer.killed}
        # Every kill landed on a request: the agent logged that request's worker as killed.
        assert all(cmd == command for cmd in logged.values()), (command, logged)
        print(f"{command}: {len(killer.killed)} busy workers killed, {killer.idle_spared} idle ones spared, "
              f"agent killed (status {killer.agent_status})")
        return failed


def test_no_failed_pod_and_nothing_left(lab, setup):
    conf = default_chain(lab)
    atts = pods(lab, PODS, "k")
    runtime = Runtime([setup.warm], lab.path("cache", "x").rsplit("/", 1)[0], node_netns=lab.node)
    args = ("--reconcile", "off", "--pool", "2")
    failed = _phase(setup, args, "ADD", lambda: all_at_once(runtime, atts, lambda att: runtime.add(conf, att)))
    assert failed == {}
    for att in atts:
        lab.run(att.netns, "ping", "-c1", "-W2", "10.22.0.1")
    failed = _phase(setup, args, "DEL", lambda: all_at_once(runtime, atts, lambda att: runtime.delete(conf, att)))
    assert failed == {}
    assert leftovers(footprint(lab)) == {}
