"""The agent's event loop: one thread around epoll -- register, dispatch, wake on signals, drain.

One thread: forking from a multi-threaded process is unsafe, and the loop only parses small frames
and hands requests to pooled workers (or forks), so it is never the bottleneck (~1.5 ms of loop CPU
per request when every worker is forked on demand, less with the pool).  This module keeps only
the loop itself: which descriptors are registered and under which tag (:mod:`events`), what a
ready key is dispatched to, the deadline sweep, signals and the drain.  What happens on a
connection before GO is :mod:`handshake`'s (its states, :mod:`connection`'s); a request's worker,
from start to reaping, is :mod:`inflight`'s; the idle pooled workers are :mod:`pool_keeper`'s.

Signals only record themselves (the wakeup fd ends the select); the loop then drains: listeners
close at once, connections that have not been told GO are refused (their shims run cold), running
workers are waited for up to the drain limit, and a second signal leaves immediately -- workers
still answer their shims on their own.
"""

from __future__ import annotations

import errno
import gc
import os
import selectors
import signal
import socket
import sys
import time
from types import FrameType
from typing import Any, Optional

from cnichain.agent import activation, events, peer, sockets
from cnichain.agent.config import AgentConfig, parse_args
from cnichain.agent.connection import CNI, METRICS, Conn
from cnichain.agent.handshake import Handshake
from cnichain.agent.inflight import InFlight
from cnichain.agent.log import AgentLog
from cnichain.agent.metrics import Metrics
from cnichain.agent.pool_keeper import PoolKeeper
from cnichain.agent.reconcile import Process as Reconciler
from cnichain.agent.reconcile.settings import status_path
from cnichain.agent.warmup import exercise, load_plugins, preload
from cnichain.common import shim
from cnichain.common.record import FrozenRecord

TYPE_CHECKING = False
if TYPE_CHECKING:
    from cnichain.common.skel import Plugin

# Listener kinds: what a listening socket serves, and so the kind of connection it accepts.
LISTEN_CNI = "cni"  # the shims' unix socket
LISTEN_METRICS = "metrics"  # the root-only metrics unix socket
LISTEN_METRICS_TCP = "metrics-tcp"  # the opt-in loopback port: no peer credentials to check
CONN_KIND = {LISTEN_CNI: CNI, LISTEN_METRICS: METRICS, LISTEN_METRICS_TCP: METRICS}


class Listener(FrozenRecord):
    """A listening socket, what it serves, and the path and inode it owns (unix sockets only)."""

    __slots__ = _fields = ("sock", "kind", "path", "inode")

    sock: socket.socket
    kind: str  # LISTEN_*
    path: str  # "" for the TCP port
    inode: int  # of the socket file we created: unlinked at shutdown only if still ours

    def __init__(self, sock: socket.socket, kind: str, path: str, inode: int) -> None:
        self._assign(sock=sock, kind=kind, path=path, inode=inode)


class Agent:
    """The agent process: its settings, warm plugins, selector, and the parts the loop drives."""

    def __init__(self, config: AgentConfig) -> None:
        self.cfg = config
        self.metrics = Metrics()
        self.log = AgentLog()
        self.plugins: dict[str, Plugin] = {}  # filled by prepare(); the parts below share this dict
        self.sel: selectors.BaseSelector = selectors.DefaultSelector()
        self.listeners: dict[int, Listener] = {}  # fd -> listener
        self.conns: dict[int, Conn] = {}  # fd -> every open connection, until closed
        self.pool = PoolKeeper(config, self.plugins, self.sel, self.log)
        self.metrics.sources.append(self.pool.metric_lines)
        self.inflight = InFlight(config, self.plugins, self.sel, self.pool, self.metrics, self.log, self._close)
        self.handshake = Handshake(config, self.plugins, self.metrics, self.log, self._close, self.inflight.start)
        self.draining = False
        self.drain_deadline = 0.0
        self.stop_now = False
        self._wake_r, self._wake_w = socket.socketpair()
        self._signals: list[int] = []
        config.reconcile.status_file = config.reconcile.status_file or status_path(config.socket_path)
        config.reconcile.log_file = config.reconcile.log_file or config.log_file
        self.reconciler = Reconciler(config.reconcile, self.log)
        self.metrics.sources.append(self.reconciler.metric_lines)
        self.inflight.on_end = self.reconciler.served  # each ADD served: the reconciler's hint

    # -- set-up ------------------------------------------------------------------------------
    def prepare(self) -> None:
        """Warm up (as root), install the signal handlers, then listen -- the CNI socket last."""
        if os.geteuid() != 0:
            raise SystemExit("cnichain-agent: must run as root (it runs CNI plugins for the runtime)")
        if self.cfg.log_file:
            self.log.open(self.cfg.log_file)
        # Sockets systemd passed (deploy/cnichain-agent.socket), taken before anything else runs.
        passed = activation.assign(activation.listen_fds(), {activation.NAME_CNI: self.cfg.socket_path,
                                                              activation.NAME_METRICS: self.cfg.metrics_path})
        started = time.perf_counter()
        self.plugins.update(load_plugins(self.cfg.extra_plugins))
        loaded = preload(self.plugins)
        loaded += exercise(self.plugins)
        peer.rehearse()  # resolve what entering a caller's namespaces needs once, before any fork
        gc.collect()
        gc.freeze()  # keep the warm heap shared with workers (no copy-on-write from the collector)
        self.log(f"warm in {(time.perf_counter() - started) * 1000:.0f} ms: plugins={','.join(sorted(self.plugins))} "
                 f"preloaded={','.join(x for x in loaded if not x.startswith('cnichain.'))}")
        self._wake_r.setblocking(False)
        self._wake_w.setblocking(False)
        signal.set_wakeup_fd(self._wake_w.fileno(), warn_on_full_buffer=False)
        signal.signal(signal.SIGTERM, self._on_signal)
        signal.signal(signal.SIGINT, self._on_signal)
        signal.signal(signal.SIGHUP, signal.SIG_IGN)
        signal.signal(signal.SIGPIPE, signal.SIG_IGN)
        self.sel.register(self._wake_r, selectors.EVENT_READ, (events.WAKE, None))
        self.log.flush_before_fork()
        self.reconciler.start()  # its own process: never a thread in this forking loop
        metrics_socket = self.cfg.metrics_path
        if metrics_socket:
            self._listen_unix(metrics_socket, LISTEN_METRICS, passed.get(activation.NAME_METRICS))
        if self.cfg.metrics_port:
            self._add_listener(sockets.listen_loopback(self.cfg.metrics_port), LISTEN_METRICS_TCP, "")
        # Last: once the CNI socket exists, shims use it.
        self._listen_unix(self.cfg.socket_path, LISTEN_CNI, passed.get(activation.NAME_CNI))
        self.log(f"serving on {self.cfg.socket_path}" + (f", metrics on {metrics_socket}" if metrics_socket else "")
                 + (f" and 127.0.0.1:{self.cfg.metrics_port}" if self.cfg.metrics_port else "")
                 + (f" (from systemd: {', '.join(sorted(passed))})" if passed else ""))

    def _listen_unix(self, path: str, kind: str, passed: Optional[tuple[socket.socket, str]] = None) -> None:
        if passed is not None:  # systemd's socket: never unlinked by us (inode 0), it outlives the agent
            self._add_listener(passed[0], kind, path)
            return
        sock = sockets.listen_unix(path)
        self._add_listener(sock, kind, path, os.stat(path).st_ino)

    def _add_listener(self, sock: socket.socket, kind: str, path: str, inode: int = 0) -> None:
        sock.setblocking(False)
        self.listeners[sock.fileno()] = Listener(sock, kind, path, inode)
        self.sel.register(sock, selectors.EVENT_READ, (events.LISTEN, kind))

    # -- signals and shutdown --------------------------------------------------------------
    def _on_signal(self, signum: int, _frame: Optional[FrameType]) -> None:
        # Only record it: the loop acts on it (the wakeup fd ends its select), so the handler never
        # runs in the middle of the loop's own bookkeeping.
        self._signals.append(signum)

    def _handle_signals(self) -> None:
        while self._signals:
            signum = self._signals.pop(0)
            if self.draining:
                self.stop_now = True  # a second signal: leave now; workers still answer their shims
                self.log(f"signal {signal.Signals(signum).name} while draining: leaving now")
            self.begin_drain(f"signal {signal.Signals(signum).name}")

    def begin_drain(self, why: str) -> None:
        """Stop taking work: close the listeners and the pool, refuse what was not told GO yet."""
        if self.draining:
            return
        self.draining = True
        self.drain_deadline = time.monotonic() + self.cfg.drain_limit
        self.log(f"draining ({why}): {self.inflight.count} request(s) in flight")
        self._close_listeners()
        self.pool.close()
        for conn in list(self.conns.values()):
            if conn.handshaking:
                self.handshake.refuse(conn, "agent is shutting down", "draining")

    def _close_listeners(self) -> None:
        for listener in list(self.listeners.values()):
            events.unregister(self.sel, listener.sock)
            if listener.path:
                sockets.unlink_if_ours(listener.path, listener.inode)
            listener.sock.close()
        self.listeners.clear()

    # -- the loop --------------------------------------------------------------------------
    def serve_forever(self) -> int:
        """Serve until drained (or told twice to stop); returns the exit code."""
        while not self.stop_now:
            if self.draining and not self.inflight.count:
                break
            now = time.monotonic()
            if self.draining and now >= self.drain_deadline:
                self.log(f"drain timeout: leaving {self.inflight.count} worker(s) to answer on their own")
                break
            self.pool.refill(busy=self.draining or bool(self.inflight.count))
            timeout = self._next_deadline(now)
            for key, _events in self.sel.select(timeout):
                # An earlier event of this batch may have closed this one's object (a worker reaped
                # before its shim's end-of-stream was read): skip keys that are no longer registered.
                if self.sel.get_map().get(key.fd) is not key:
                    continue
                try:
                    self._dispatch_event(key)
                except Exception as exc:  # noqa: BLE001 - one request's trouble never stops the agent
                    import traceback

                    self.log(f"internal error handling {key.data[0]}: {exc!r}\n{traceback.format_exc()}")
                    if key.data[0] == events.CONN and not key.data[1].running:
                        self._close(key.data[1])
            self._handle_signals()
            self._expire(time.monotonic())
        self._close_listeners()
        self.pool.close()
        for conn in list(self.conns.values()):
            self._close(conn)
        self.reconciler.stop()
        self.log("stopped")
        return 0

    def _dispatch_event(self, key: selectors.SelectorKey) -> None:
        tag, arg = key.data
        if tag == events.WAKE:
            self._drain_wakeups()
        elif tag == events.LISTEN:
            self._accept(key.fileobj, arg)  # type: ignore[arg-type]
        elif tag == events.CONN:
            self._readable(arg)
        elif tag == events.CHILD:
            self.inflight.reap(arg)
        elif tag == events.WORKER_CHAN:
            self.pool.on_message(arg)
        elif tag == events.WORKER_EXIT:
            self.pool.on_exit(arg)

    def _next_deadline(self, now: float) -> float:
        deadlines = [c.deadline for c in self.conns.values() if c.deadline]
        if self.draining:
            deadlines.append(self.drain_deadline)
        if not deadlines:
            return 1.0
        return max(0.0, min(min(deadlines) - now, 1.0))

    def _drain_wakeups(self) -> None:
        try:
            while self._wake_r.recv(512):
                pass
        except BlockingIOError:
            pass

    def _expire(self, now: float) -> None:
        """The deadline sweep: kill an overdue worker; close an overdue client (its shim went cold)."""
        for conn in list(self.conns.values()):
            if not conn.deadline or now < conn.deadline:
                continue
            if conn.running:
                self.inflight.kill(conn)
            else:
                self._close(conn)  # a silent or slow client: its shim has gone cold already

    # -- connections: accepted, readable, closed -----------------------------------------------
    def _accept(self, listener: socket.socket, kind: str) -> None:
        while True:
            try:
                sock, _addr = listener.accept()
            except (BlockingIOError, InterruptedError):
                return
            except OSError as exc:
                if exc.errno in (errno.EMFILE, errno.ENFILE):
                    self.log(f"accept: {exc.strerror}")
                return
            conn = Conn(sock, CONN_KIND[kind], time.monotonic())
            if kind != LISTEN_METRICS_TCP and not self.handshake.peer_is_root(conn):
                continue
            if conn.kind == CNI and not self.handshake.admit(conn, self.draining, self.inflight.count):
                continue
            sock.setblocking(False)
            self.conns[sock.fileno()] = conn
            self.sel.register(sock, selectors.EVENT_READ, (events.CONN, conn))

    def _readable(self, conn: Conn) -> None:
        chunk = events.read_ready(conn.sock, 65536)
        if chunk is None:
            return
        if not chunk:
            # The shim went away before the go-ahead (its timeout, or it was killed): nothing ran.
            if not conn.running:
                self._close(conn)
            else:
                events.unregister(self.sel, conn.sock)  # the worker still owns the reply
            return
        self.handshake.received(conn, chunk)

    def _close(self, conn: Conn) -> None:
        """Forget ``conn`` and close what it holds -- but not the socket of a running worker's."""
        fd = conn.sock.fileno()
        if fd >= 0 and self.conns.get(fd) is conn:
            del self.conns[fd]
            events.unregister(self.sel, conn.sock)
        conn.close_ns_fds()
        if conn.pidfd >= 0:  # still running: keep tracking the worker, just forget the socket
            return
        conn.sock.close()


def serve(socket_path: str = shim.DEFAULT_SOCKET, **options: Any) -> int:
    """Run the agent in the foreground until SIGTERM/SIGINT (then drain); returns the exit code."""
    return run(AgentConfig(socket_path=socket_path, **options))


def run(config: AgentConfig) -> int:
    """Warm up, serve and drain one agent with ``config``; returns the exit code."""
    agent = Agent(config)
    agent.prepare()
    return agent.serve_forever()


def main(argv: Optional[list[str]] = None) -> int:
    """``cnichain agent [options]`` (= ``python -m cnichain.agent``): serve; ``... status [options]``: its view."""
    args = sys.argv[1:] if argv is None else list(argv)
    if args[:1] == ["status"]:
        from cnichain.agent.control import status_main

        return status_main(args[1:])
    return run(parse_args(args))
