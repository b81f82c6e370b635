"""Requests in flight: the worker each one runs in, from the go-ahead to its reaping.

At GO a connection gets a worker -- a warm one from the pool when one is ready, else one forked on
the spot -- and from then on the worker, not the agent, answers the shim.  The agent only watches
the worker's pidfd: when it exits, :meth:`InFlight.reap` logs and counts the outcome and answers
the shim in the worker's place if it timed out or crashed; when it overstays its deadline,
:meth:`InFlight.kill` ends it.  The count of workers here is what ``--max-workers`` bounds, and
what a drain waits for.
"""

from __future__ import annotations

import os
import selectors
import signal
import time
from typing import Callable

from cnichain.cli.agent import events, protocol, sockets, worker
from cnichain.cli.agent.config import AgentConfig
from cnichain.cli.agent.connection import Conn
from cnichain.cli.agent.delegates import DelegateRunner
from cnichain.cli.agent.log import AgentLog
from cnichain.cli.agent.metrics import Metrics
from cnichain.cli.agent.pool_keeper import PoolKeeper

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

    @property
    def count(self) -> int:
        """How many workers are running (what ``max_workers`` bounds and a drain waits for)."""
        return len(self.children)

    def start(self, conn: Conn) -> None:
        """The shim said GO: move ``conn`` to RUN and give its request to a worker."""
        assert conn.req is not None
        plugin = self.plugins[conn.req.plugin_type]
        conn.run(time.monotonic(), self.cfg.request_timeout)
        conn.sock.setblocking(True)
        pid, pidfd = self.pool.take(conn.payload, conn.sock, conn.net_fd, conn.mnt_fd)
        conn.pooled = bool(pid)
        if pid:
            self.metrics.worker_started("pooled")
        else:
            self.log.flush_before_fork()
            pid = os.fork()
            if pid == 0:  # the worker
                status = worker.EXIT_FAILED
                try:
                    delegates = DelegateRunner(self.plugins, self.cfg.socket_path, self.cfg.request_timeout)
                    status = worker.run(conn.sock, conn.req, plugin, conn.net_fd, conn.mnt_fd,
                                        self.cfg.request_timeout, delegates if self.cfg.fork_delegates else None)
                except BaseException:  # noqa: BLE001 - the parent reports it; never unwind into the loop
                    status = worker.EXIT_FAILED
                finally:
                    os._exit(status)
            pidfd = os.pidfd_open(pid)
            self.metrics.worker_started("forked")
        conn.child = pid
        conn.close_ns_fds()
        conn.pidfd = pidfd
        self.children[conn.pidfd] = conn
        self.metrics.inflight = len(self.children)
        self.sel.register(conn.pidfd, selectors.EVENT_READ, (events.CHILD, conn))

    def reap(self, conn: Conn) -> None:
        """Its pidfd is readable: the worker exited.  Log and count it, answer for it if it could
        not, and let the connection go."""
        usage = None
        try:
            _pid, status, usage = os.wait4(conn.child, 0)
        except ChildProcessError:
            status = 0
        elapsed = time.monotonic() - conn.started
        req = conn.req
        assert req is not None
        code, outcome, how = worker.outcome_of(status, conn.killed)
        self.metrics.done(req.plugin_type, req.command, outcome, elapsed)
        if outcome in ("timeout", "crashed"):
            msg = worker.failure_message(req, outcome, how, self.cfg.request_timeout)
            sockets.send_quietly(conn.sock, protocol.error_result(msg))
        self.log(
            f"request plugin={req.plugin_type} command={req.command or '-'} container={req.container_id} "
            f"exit={code} outcome={outcome} ms={elapsed * 1000:.1f} worker={conn.child}{'/pooled' if conn.pooled else ''}"
            + (f" cpu_ms={(usage.ru_utime + usage.ru_stime) * 1000:.1f} faults={usage.ru_minflt}" if usage else "")
        )
        events.unregister(self.sel, conn.pidfd)
        del self.children[conn.pidfd]
        os.close(conn.pidfd)
        conn.pidfd = -1
        self.metrics.inflight = len(self.children)
        self.close(conn)

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
