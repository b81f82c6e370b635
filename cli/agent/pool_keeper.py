"""The agent's side of the worker pool: which pre-forked workers it holds, and their lives until used.

:mod:`pool` is what a pooled worker is and does (fork, warm, wait, take one request); this module
is the bookkeeping the agent does around them, kept out of the event loop: forking one more when
the pool is short and nothing is running (:meth:`PoolKeeper.refill`), noticing "ready" and early
exits on the selector, handing a request to a warm one (:meth:`PoolKeeper.take`), and killing and
reaping the unused ones at drain.  A request never waits for the pool: when no worker is ready,
the server forks one for it on the spot.
"""

from __future__ import annotations

import os
import selectors
import signal
import socket
import time

from cnichain.cli.agent import events, pool
from cnichain.cli.agent.config import AgentConfig
from cnichain.cli.agent.log import AgentLog

TYPE_CHECKING = False
if TYPE_CHECKING:
    from cnichain.common.skel import Plugin

RETRY_AFTER = 1.0  # seconds without forking after a pooled worker could not be forked or died unused


class PoolKeeper:
    """The idle pooled workers (pidfd -> :class:`pool.Idle`) and when to fork the next one."""

    cfg: AgentConfig
    plugins: dict[str, Plugin]
    sel: selectors.BaseSelector
    log: AgentLog
    idle: dict[int, pool.Idle]  # pidfd -> pre-forked worker not yet given a request
    retry_at: float  # after a failure: no fork before this (monotonic)

    def __init__(self, cfg: AgentConfig, plugins: dict[str, Plugin], sel: selectors.BaseSelector,
                 log: AgentLog) -> None:
        self.cfg = cfg
        self.plugins = plugins
        self.sel = sel
        self.log = log
        self.idle = {}
        self.retry_at = 0.0

    def take(self, payload: bytes, sock: socket.socket, net_fd: int, mnt_fd: int) -> tuple[int, int]:
        """Hand a request to a warm pooled worker: (pid, pidfd), or (0, -1) when none can take it
        now (the caller forks one on the spot; a request never waits for the pool)."""
        if len(payload) > pool.MAX_JOB:
            return 0, -1
        while True:
            idle = pool.next_ready(self.idle)
            if idle is None:
                return 0, -1
            self._forget(idle)
            if pool.hand_over(idle, payload, sock, net_fd, mnt_fd):
                pidfd, idle.pidfd = idle.pidfd, -1  # now the request's worker; its pidfd moves to conn
                idle.close()
                return idle.pid, pidfd
            self._discard(idle)  # it died between "ready" and now: try the next one

    def refill(self, busy: bool) -> None:
        """Fork one pooled worker when the pool is short and the agent is not ``busy`` (running
        requests, or draining).

        One per loop turn keeps the loop lively; waiting for a moment without running requests
        keeps the fork (~1 ms of the loop) and the worker's first steps from competing with them.
        Under sustained load the pool stays empty and requests fork their workers as before.
        """
        if busy or len(self.idle) >= self.cfg.pool_size or time.monotonic() < self.retry_at:
            return
        self.log.flush_before_fork()
        try:
            idle = pool.spawn(self.plugins, self.cfg.socket_path, self.cfg.request_timeout, self.cfg.fork_delegates)
        except OSError as exc:
            self.log(f"pool: cannot fork a worker: {exc}")
            self.retry_at = time.monotonic() + RETRY_AFTER
            return
        self.idle[idle.pidfd] = idle
        self.sel.register(idle.chan, selectors.EVENT_READ, (events.IDLE_CHAN, idle))
        self.sel.register(idle.pidfd, selectors.EVENT_READ, (events.IDLE_EXIT, idle))

    def on_message(self, idle: pool.Idle) -> None:
        """Its channel is readable: "ready" (it is warm), or end-of-stream (it is exiting)."""
        msg = events.read_ready(idle.chan, 64)
        if msg is None:
            return
        if msg == pool.READY:
            idle.ready = True
        elif not msg:
            events.unregister(self.sel, idle.chan)  # it is exiting; its pidfd tells when

    def on_exit(self, idle: pool.Idle) -> None:
        """A pooled worker left before it was given a request: something is wrong with warming."""
        self.log(f"pool: worker {idle.pid} exited before serving a request")
        self._forget(idle)
        self._discard(idle)
        self.retry_at = time.monotonic() + RETRY_AFTER

    def close(self) -> None:
        """Kill and reap every idle worker (drain, shutdown): none of them holds a request."""
        idles = list(self.idle.values())
        for idle in idles:  # all signalled first: a worker still warming at SCHED_IDLE may be slow to go
            self._forget(idle)
            try:
                os.kill(idle.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        for idle in idles:
            self._discard(idle)

    def _forget(self, idle: pool.Idle) -> None:
        events.unregister(self.sel, idle.chan)
        events.unregister(self.sel, idle.pidfd)
        self.idle.pop(idle.pidfd, None)

    def _discard(self, idle: pool.Idle) -> None:
        """Kill an unused pooled worker (it holds no request) and reap it."""
        try:
            os.kill(idle.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        try:
            os.waitpid(idle.pid, 0)
        except ChildProcessError:
            pass
        idle.close()
