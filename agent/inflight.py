"""Requests in flight: the worker each one runs in, from the go-ahead to its report or its death.

At GO a connection gets a worker -- a ready long-lived one, else one forked for it on the spot
(:mod:`pool_keeper`) -- and from then on the worker, not the agent, answers the shim.  A long-lived
worker reports DONE when it has answered and is back home (:meth:`InFlight.finished`); when it dies
instead -- a crash, its alarm, the agent's SIGKILL at the deadline -- :meth:`InFlight.died` answers
the shim in its place.  A request too large for a worker's channel runs in a one-shot worker forked
for it, reaped here (:meth:`InFlight.reap`).  Either way the outcome is logged and counted once,
in :meth:`InFlight._end`.  The count of requests here is what the capacity bounds (the memory
budget and CPUs, :mod:`budget`), and what a drain waits for.

Beyond the capacity a request told GO waits in a FIFO queue (:data:`connection.WAIT`) until a
request ends and frees a worker, for at most ``--queue-wait`` seconds; then, like a request the
agent is draining away from, its connection is closed and its shim runs it cold -- nothing of it
ran yet.  No request comes from one of the agent's own workers: bridge's IPAM delegate runs in
bridge's worker (:mod:`delegates`), so a storm of pods never waits for a worker it holds itself.

A worker killed by SIGKILL that the agent did not send (the kernel's OOM killer, an operator) is
the "killed" outcome: the agent does not answer for it, it closes the connection, and the shim
runs the request cold -- the plugins pick up or undo what the dead worker left half made, so the
pod's request is not failed by the agent's own trouble.
"""

from __future__ import annotations

import gc
import os
import selectors
import signal
import time
from typing import Any, Callable, Optional

from cnichain.agent import events, protocol, sockets, worker
from cnichain.agent.config import AgentConfig
from cnichain.agent.connection import Conn
from cnichain.agent.delegates import DelegateRunner
from cnichain.agent.log import AgentLog
from cnichain.agent.metrics import Metrics
from cnichain.agent.pool import Done
from cnichain.agent.pool_keeper import POOLED, PoolKeeper

TYPE_CHECKING = False
if TYPE_CHECKING:
    from cnichain.common.skel import Plugin


class InFlight:
    """The running workers (pidfd -> their connection), started, reaped and killed here."""

    cfg: AgentConfig
    plugins: dict[str, Plugin]
    sel: selectors.BaseSelector
    pool: PoolKeeper
    metrics: Metrics
    log: AgentLog
    close: Callable[[Conn], None]  # the loop's: forget the connection once its worker is reaped
    children: dict[int, Conn]  # pidfd -> the connection its worker answers

    def __init__(self, cfg: AgentConfig, plugins: dict[str, Plugin], sel: selectors.BaseSelector,
                 pool: PoolKeeper, metrics: Metrics, log: AgentLog, close: Callable[[Conn], None]) -> None:
        self.cfg = cfg
        self.plugins = plugins
        self.sel = sel
        self.pool = pool
        self.metrics = metrics
        self.log = log
        self.close = close
        self.children = {}
        self.on_end: Optional[Callable[[Any, int], None]] = None  # (request, exit code): the reconciler's hint
        self.waiting: dict[Conn, None] = {}  # queued for a worker, oldest first
        self.capacity = cfg.max_workers
        pool.finished = self.finished
        pool.died = self.died

    @property
    def count(self) -> int:
        """How many workers are running (what ``max_workers`` bounds and a drain waits for)."""
        return len(self.children)

    @property
    def queued(self) -> int:
        """How many requests wait for a worker."""
        return len(self.waiting)

    def start(self, conn: Conn) -> None:
        """The shim said GO: give its request to a worker, or queue it when all the budget allows
        are busy."""
        if len(self.children) >= self.capacity:
            conn.wait(time.monotonic(), self.cfg.queue_wait)
            self.waiting[conn] = None
            self.metrics.queue_entered(len(self.waiting))
            return
        self._run(conn)

    def unqueue(self, conn: Conn) -> bool:
        """Take ``conn`` out of the queue (its shim went away, or it is being closed)."""
        if conn in self.waiting:
            del self.waiting[conn]
            self.metrics.queue_now = len(self.waiting)
            return True
        return False

    def expire_wait(self, conn: Conn) -> None:
        """``conn`` waited its bound: close it, and its shim runs the request cold."""
        self.unqueue(conn)
        self.metrics.refuse("queue wait")
        self.log(f"request from pid {conn.pid} waited {self.cfg.queue_wait:g}s for a worker: running it cold")
        self.close(conn)

    def drop_waiting(self) -> None:
        """Draining: every queued request goes back to its shim's cold path."""
        for conn in list(self.waiting):
            self.unqueue(conn)
            self.metrics.refuse("draining")
            self.close(conn)

    def _next(self) -> None:
        """A request ended: start the oldest queued ones the capacity now allows."""
        while self.waiting and len(self.children) < self.capacity:
            conn = next(iter(self.waiting))
            self.unqueue(conn)
            try:
                self._run(conn)
            except Exception as exc:  # noqa: BLE001 - that request goes cold; the queue goes on
                self.log(f"cannot start a queued request: {exc!r}")
                self.close(conn)

    def _run(self, conn: Conn) -> None:
        """Move ``conn`` to RUN and give its request to a worker."""
        assert conn.req is not None
        conn.run(time.monotonic(), self.cfg.request_timeout)
        conn.sock.setblocking(True)
        w, how = self.pool.take(conn.payload, conn.sock, conn.net_fd, conn.mnt_fd)
        self.metrics.worker_started(how)
        if w is not None:  # a long-lived worker: its DONE (or its death) ends the request
            self.pool.attach(w, conn)
            conn.pooled = how == POOLED
            conn.child, conn.pidfd = w.pid, w.pidfd  # the pidfd stays the pool's; only tracked here
        else:
            conn.child, conn.pidfd = self._fork_one_shot(conn)
            self.sel.register(conn.pidfd, selectors.EVENT_READ, (events.CHILD, conn))
        conn.close_ns_fds()
        self.children[conn.pidfd] = conn
        self.metrics.inflight = len(self.children)
        self.pool.note_parallel(len(self.children))

    def _fork_one_shot(self, conn: Conn) -> tuple[int, int]:
        """A worker forked for this one request, which exits after it (a request too large for a
        long-lived worker's channel, or one could not be forked): (pid, pidfd)."""
        assert conn.req is not None
        plugin = self.plugins[conn.req.plugin_type]
        self.log.flush_before_fork()
        pid = os.fork()
        if pid == 0:  # the worker
            gc.freeze()  # what the agent built stays shared: our collector never walks it
            status = worker.EXIT_FAILED
            try:
                delegates = DelegateRunner(self.plugins, self.cfg.socket_path)
                status = worker.run(conn.sock, conn.req, plugin, conn.net_fd, conn.mnt_fd,
                                    self.cfg.request_timeout, delegates if self.cfg.delegates_in_place else None)
            except BaseException:  # noqa: BLE001 - the parent reports it; never unwind into the loop
                status = worker.EXIT_FAILED
            finally:
                os._exit(status)
        return pid, os.pidfd_open(pid)

    def reap(self, conn: Conn) -> None:
        """A one-shot worker's pidfd is readable: it exited.  Reap it and end the request."""
        usage = None
        try:
            _pid, status, usage = os.wait4(conn.child, 0)
        except ChildProcessError:
            status = 0
        events.unregister(self.sel, conn.pidfd)
        os.close(conn.pidfd)
        self._end(conn, *worker.outcome_of(status, conn.killed), usage=usage)

    def finished(self, conn: Conn, done: Done) -> None:
        """A long-lived worker reported DONE for ``conn``: the shim has its answer."""
        code, outcome, how = worker.outcome_of_report(done.status)
        self._end(conn, code, outcome, how, cost=(done.cpu, done.faults))

    def died(self, conn: Conn, status: int, usage: Any) -> None:
        """A long-lived worker exited without reporting DONE for ``conn``: it crashed, hung (its
        alarm) or was killed at the deadline.  The pool keeper reaped it."""
        self._end(conn, *worker.outcome_of(status, conn.killed), usage=usage)

    def _end(self, conn: Conn, code: int, outcome: str, how: str, usage: Any = None,
             cost: Optional[tuple[float, int]] = None) -> None:
        """Log and count the request, answer for its worker if it could not, let the connection go."""
        elapsed = time.monotonic() - conn.started
        req = conn.req
        assert req is not None
        self.metrics.done(req.plugin_type, req.command, outcome, elapsed)
        if self.on_end is not None:
            self.on_end(req, code)
        if outcome in ("timeout", "crashed"):
            msg = worker.failure_message(req, outcome, how, self.cfg.request_timeout)
            sockets.send_quietly(conn.sock, protocol.error_result(msg))
        # "killed": no answer -- closing the connection sends the shim cold (module docstring).
        if usage is not None:
            cost = (usage.ru_utime + usage.ru_stime, usage.ru_minflt)
        self.log(
            f"request plugin={req.plugin_type} command={req.command or '-'} container={req.container_id} "
            f"exit={code} outcome={outcome} ms={elapsed * 1000:.1f} worker={conn.child}{'/pooled' if conn.pooled else ''}"
            + (f" cpu_ms={cost[0] * 1000:.1f} faults={cost[1]}" if cost else "")
        )
        del self.children[conn.pidfd]
        conn.pidfd = -1
        self.metrics.inflight = len(self.children)
        self.close(conn)
        self._next()

    def kill(self, conn: Conn) -> None:
        """The worker overstayed its deadline (its own alarm did not end it): SIGKILL, once; its
        reaping reports the timeout."""
        if conn.child and not conn.killed:
            conn.killed = True
            try:
                os.kill(conn.child, signal.SIGKILL)
            except ProcessLookupError:
                pass
        conn.disarm()
