"""The agent's side of the long-lived workers: which exist, what each is doing, and how many to keep.

:mod:`pool` is what a worker is and does (fork, warm, serve, go home, verify, report); this module
is the bookkeeping the agent does around them, kept out of the event loop: handing a request to a
ready worker -- or, when none is ready, forking one for it on the spot, so a request never waits
behind another (:meth:`PoolKeeper.take`); noticing "ready", DONE and exits on the selector;
retiring workers beyond what the node needs; and killing and reaping the idle ones at drain.

How many to keep: the larger of ``--pool`` and the most requests seen in flight at once during the
last :data:`PEAK_WINDOW` (bounded by ``--max-workers``).  A burst of eight pods forks what it needs
at once; those workers then stay, so the next burst finds them ready.  Extra ones are retired when
the peak has aged out.  Forking ahead of demand (:meth:`PoolKeeper.refill`) only happens while no
request runs, one per loop turn, so it never competes with a request for the CPU.
"""

from __future__ import annotations

import os
import selectors
import signal
import socket
import time
from typing import Any, Callable, Optional

from cnichain.agent import events, pool
from cnichain.agent.config import AgentConfig
from cnichain.agent.log import AgentLog

TYPE_CHECKING = False
if TYPE_CHECKING:
    from cnichain.common.skel import Plugin

RETRY_AFTER = 1.0  # seconds without forking ahead of demand after a fork failed or a worker died idle
PEAK_WINDOW = 600.0  # seconds a burst's parallelism is remembered when sizing the pool
MEMORY_EVERY = 10.0  # seconds between two reads of the workers' private memory (metrics)

# How a request got its worker (the metrics' "how" label).
POOLED = "pooled"  # a ready worker took it
FORKED = "forked"  # a worker was forked for it (none was ready, or the request was too big for one)


class PoolKeeper:
    """Every live worker (pidfd -> :class:`pool.Worker`) and the parallelism the pool is sized to."""

    cfg: AgentConfig
    plugins: dict[str, Plugin]
    sel: selectors.BaseSelector
    log: AgentLog
    workers: dict[int, pool.Worker]  # pidfd -> live worker, whatever its state
    retry_at: float  # after a failure: no fork ahead of demand before this (monotonic)
    peak: int  # most requests in flight at once since peak_at
    peak_at: float
    closed: bool  # draining or stopped: workers that finish retire
    finished: Callable[[Any, pool.Done], None]  # in-flight's: a worker reported DONE for conn
    died: Callable[[Any, int, Any], None]  # in-flight's: a worker died serving conn (status, rusage)

    def __init__(self, cfg: AgentConfig, plugins: dict[str, Plugin], sel: selectors.BaseSelector,
                 log: AgentLog) -> None:
        self.cfg = cfg
        self.plugins = plugins
        self.sel = sel
        self.log = log
        self.workers = {}
        self.retry_at = 0.0
        self.peak = 0
        self.peak_at = 0.0
        self.closed = False
        self._memory, self._memory_at = 0, -MEMORY_EVERY
        self.finished = lambda conn, done: None
        self.died = lambda conn, status, usage: None

    # -- sizing ------------------------------------------------------------------------------
    @property
    def limits(self) -> pool.Limits:
        return pool.Limits(self.cfg.request_timeout, self.cfg.worker_requests, self.cfg.worker_rss_growth,
                           self.cfg.delegates_in_place, self.cfg.socket_path)

    def note_parallel(self, in_flight: int) -> None:
        """Remember how many requests run at once (called at each start)."""
        now = time.monotonic()
        if in_flight >= self.peak or now - self.peak_at > PEAK_WINDOW:
            self.peak, self.peak_at = in_flight, now

    def target(self) -> int:
        """How many workers to keep: ``--pool``, or the recent peak of parallel requests if higher."""
        peak = self.peak if time.monotonic() - self.peak_at <= PEAK_WINDOW else 0
        return min(self.cfg.max_workers, max(self.cfg.pool_size, peak))

    def private_memory(self) -> int:
        """Bytes the workers hold of their own (private pages, ``smaps_rollup``), at most
        :data:`MEMORY_EVERY` seconds old: reading it walks each worker's page tables (~1 ms), far
        too much for every scrape of a poller, so a scrape between two reads gets the last sum."""
        now = time.monotonic()
        if now - self._memory_at >= MEMORY_EVERY:
            self._memory = sum(private_bytes(w.pid) for w in self.workers.values())
            self._memory_at = now
        return self._memory

    def metric_lines(self) -> list[str]:
        """The pool as Prometheus gauges: workers in each state, and the memory they hold."""
        counts = dict.fromkeys((pool.WARMING, pool.IDLE, pool.BUSY, pool.RETIRING), 0)
        for w in self.workers.values():
            counts[w.state] = counts.get(w.state, 0) + 1
        return ["# HELP cnichain_agent_workers Long-lived workers by state.",
                "# TYPE cnichain_agent_workers gauge",
                *(f'cnichain_agent_workers{{state="{state}"}} {n}' for state, n in counts.items()),
                "# HELP cnichain_agent_pool_memory_bytes Memory the workers do not share with the agent or each other (at most 10 s old).",
                "# TYPE cnichain_agent_pool_memory_bytes gauge",
                f"cnichain_agent_pool_memory_bytes {self.private_memory()}"]

    def _live(self) -> int:
        return sum(1 for w in self.workers.values() if w.state != pool.RETIRING)

    # -- requests ----------------------------------------------------------------------------
    def take(self, payload: bytes, sock: socket.socket, net_fd: int, mnt_fd: int) -> tuple[Optional[pool.Worker], str]:
        """Hand a request to a ready worker, else to one forked for it now: (worker, how); (None,
        FORKED) when the request cannot go to a long-lived worker (too large for the channel, or
        the fork failed), and the caller forks a one-shot worker instead."""
        if len(payload) > pool.MAX_JOB:
            return None, FORKED
        while True:
            w = pool.next_ready(self.workers)
            if w is None:
                break
            if pool.hand_over(w, payload, sock, net_fd, mnt_fd):
                w.state = pool.BUSY
                return w, POOLED
            self._retire(w, "it could not take a request")  # it died between "ready" and now
        self.log.flush_before_fork()
        try:
            w = pool.spawn(self.plugins, self.limits, warm_first=False)
        except OSError as exc:
            self.log(f"pool: cannot fork a worker: {exc}")
            return None, FORKED
        self._track(w)
        if not pool.hand_over(w, payload, sock, net_fd, mnt_fd):
            self._retire(w, "it could not take a request")
            return None, FORKED
        return w, FORKED

    def refill(self, busy: bool) -> None:
        """Fork one worker ahead of demand when fewer than :meth:`target` live and the agent is
        not ``busy`` (running requests, or draining); retire one idle worker when more do.

        One per loop turn keeps the loop lively; waiting for a moment without running requests
        keeps the fork (~1 ms of the loop) and the worker's warming from competing with them.
        """
        if busy or self.closed:
            return
        live, target = self._live(), self.target()
        if live > target:
            idle = pool.next_ready(self.workers)
            if idle is not None:
                self._retire(idle, f"the pool is larger than the node needs ({live} > {target})")
            return
        if live >= target or time.monotonic() < self.retry_at:
            return
        self.log.flush_before_fork()
        try:
            w = pool.spawn(self.plugins, self.limits, warm_first=True)
        except OSError as exc:
            self.log(f"pool: cannot fork a worker: {exc}")
            self.retry_at = time.monotonic() + RETRY_AFTER
            return
        self._track(w)

    # -- what the workers say ----------------------------------------------------------------
    def on_message(self, w: pool.Worker) -> None:
        """Its channel is readable: "ready", DONE, or end-of-stream (it is exiting)."""
        msg = events.read_ready(w.chan, 4096)
        if msg is None:
            return
        if msg == pool.READY and w.state == pool.WARMING:
            w.state = pool.IDLE
            return
        if not msg:
            # End-of-stream: it is exiting (its pidfd says when, and on_exit says whether that
            # was expected).
            events.unregister(self.sel, w.chan)
            return
        done = pool.decode_done(msg)
        if done is None or w.state != pool.BUSY:
            self._retire(w, f"unexpected message {msg[:16]!r}")  # something a worker never sends
            return
        conn, w.conn = w.conn, None
        w.served += 1
        w.state = pool.IDLE
        self.finished(conn, done)
        if not done.keep:
            w.state = pool.RETIRING  # it exits by itself
            events.unregister(self.sel, w.chan)
            self.log(f"pool: worker {w.pid} retired after {w.served} request(s): {done.reason}")
        elif self.closed:
            self._retire(w, "the agent is draining")
        elif self._live() > self.target():
            self._retire(w, "the pool is larger than the node needs")

    def on_exit(self, w: pool.Worker) -> None:
        """Its pidfd is readable: the worker exited -- retired, idle by surprise, or mid-request."""
        usage: Any = None
        try:
            _pid, status, usage = os.wait4(w.pid, 0)
        except ChildProcessError:
            status = 0
        if w.conn is not None and w.state == pool.BUSY:
            # Its DONE and its exit can be seen in the same loop turn, the exit first: a worker
            # that retired after answering reported before it left.
            self.on_message(w)
        self._forget(w)
        conn, w.conn = w.conn, None
        if conn is not None:
            self.died(conn, status, usage)  # it crashed, hung or was killed serving conn
        elif w.state != pool.RETIRING:
            self.log(f"pool: worker {w.pid} exited while {w.state} ({_how(status)})")
            self.retry_at = time.monotonic() + RETRY_AFTER
        w.close()

    def close(self) -> None:
        """Kill and reap every worker not serving a request (drain, shutdown); from now on the ones
        still serving retire when they finish (and answer their shims even if the agent is gone)."""
        self.closed = True
        spare = [w for w in self.workers.values() if w.state != pool.BUSY]
        for w in spare:  # all signalled first: a worker still warming at SCHED_IDLE may be slow to go
            self._forget(w)
            try:
                os.kill(w.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        for w in spare:
            try:
                os.waitpid(w.pid, 0)
            except ChildProcessError:
                pass
            w.close()

    # -- bookkeeping ---------------------------------------------------------------------------
    def attach(self, w: pool.Worker, conn: Any) -> None:
        """``w`` now serves ``conn`` (its DONE or its death is reported against it)."""
        w.conn = conn

    def _track(self, w: pool.Worker) -> None:
        self.workers[w.pidfd] = w
        self.sel.register(w.chan, selectors.EVENT_READ, (events.WORKER_CHAN, w))
        self.sel.register(w.pidfd, selectors.EVENT_READ, (events.WORKER_EXIT, w))

    def _retire(self, w: pool.Worker, why: str) -> None:
        """Tell an idle worker to leave (its channel closes; it exits and its pidfd reports it)."""
        if w.state == pool.RETIRING:
            return
        w.state = pool.RETIRING
        events.unregister(self.sel, w.chan)
        try:
            w.chan.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        if "larger" not in why and "draining" not in why:
            self.log(f"pool: worker {w.pid} retired: {why}")

    def _forget(self, w: pool.Worker) -> None:
        events.unregister(self.sel, w.chan)
        events.unregister(self.sel, w.pidfd)
        self.workers.pop(w.pidfd, None)


def private_bytes(pid: int) -> int:
    """Bytes of ``pid`` no other process shares (Private_Clean + Private_Dirty); 0 when it is gone."""
    total = 0
    try:
        with open(f"/proc/{pid}/smaps_rollup", "rb") as fh:
            for line in fh:
                if line.startswith((b"Private_Clean:", b"Private_Dirty:")):
                    total += int(line.split()[1]) << 10
    except (OSError, IndexError, ValueError):
        return 0
    return total


def _how(status: int) -> str:
    return f"signal {os.WTERMSIG(status)}" if os.WIFSIGNALED(status) else f"status {os.WEXITSTATUS(status)}"
