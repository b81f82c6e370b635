"""The agent's event loop: accept, check the peer, run the handshake, fork, reap, drain.

One thread around an epoll loop: forking from a multi-threaded process is unsafe, and the loop only
parses small frames, hands requests to pooled workers (or forks), so it is never the bottleneck
(~1.5 ms of loop CPU per request when every worker is forked on demand, less with the pool).  Each
CNI connection moves through ``read`` (waiting for the REQUEST) -> ``go`` (ACK sent, waiting for GO)
-> ``run`` (a worker owns the reply); VERSION, a pure function of the plugin, is answered by the
loop itself in place of the ACK (no worker, no namespace entry).  Every state has a deadline, so a
silent client or a hung worker costs one slot for a bounded time.  Metrics connections get one HTTP
answer and are closed.

Signals only record themselves (the wakeup fd ends the select); the loop then drains: listeners
close at once, connections that have not been told GO are refused (their shims run cold), running
workers are waited for up to the drain limit, and a second signal leaves immediately -- workers
still answer their shims on their own.
"""

from __future__ import annotations

import errno
import gc
import io
import os
import selectors
import signal
import socket
import time
from typing import Any, Optional

from cnichain.cli.agent import peer, pool, protocol, sockets, worker
from cnichain.cli.agent.config import GO_TIMEOUT, KILL_GRACE, READ_TIMEOUT, AgentConfig
from cnichain.cli.agent.delegates import DelegateRunner
from cnichain.cli.agent.log import AgentLog
from cnichain.cli.agent.metrics import Metrics, http_request_complete, http_response
from cnichain.cli.agent.protocol import AgentRequest, Refusal, RequestError
from cnichain.cli.agent.warmup import exercise, load_plugins, preload
from cnichain.common import shim
from cnichain.common.errors import Code


class Conn:
    """One accepted connection and where it is in the handshake."""

    __slots__ = ("sock", "kind", "pid", "uid", "net_fd", "mnt_fd", "buf", "state", "deadline",
                 "req", "payload", "child", "pidfd", "pooled", "started", "killed")

    def __init__(self, sock: socket.socket, kind: str) -> None:
        self.sock = sock
        self.kind = kind  # "cni" or "metrics"
        self.pid = self.uid = 0
        self.net_fd = self.mnt_fd = -1
        self.buf = bytearray()
        self.state = "read"  # read -> go -> run
        self.deadline = 0.0
        self.req: Optional[AgentRequest] = None
        self.payload = b""  # the REQUEST payload as received, for a pooled worker to decode
        self.child = 0
        self.pidfd = -1
        self.pooled = False
        self.started = 0.0
        self.killed = False

    def close_ns_fds(self) -> None:
        for name in ("net_fd", "mnt_fd"):
            fd = getattr(self, name)
            if fd >= 0:
                os.close(fd)
                setattr(self, name, -1)


class Agent:
    def __init__(self, config: AgentConfig) -> None:
        self.cfg = config
        self.metrics = Metrics()
        self.plugins: dict[str, Any] = {}
        self.sel = selectors.DefaultSelector()
        self.listeners: dict[int, tuple[socket.socket, str, str, int]] = {}  # fd -> (sock, kind, path, inode)
        self.conns: dict[int, Conn] = {}
        self.children: dict[int, Conn] = {}  # pidfd -> conn
        self.pool: dict[int, pool.Idle] = {}  # pidfd -> pre-forked worker not yet given a request
        self.pool_retry_at = 0.0  # after a pooled worker died unused: when to try forking again
        self.draining = False
        self.drain_deadline = 0.0
        self.stop_now = False
        self._wake_r, self._wake_w = socket.socketpair()
        self.log = AgentLog()
        self._signals: list[int] = []

    # -- set-up ------------------------------------------------------------------------------
    def prepare(self) -> None:
        if os.geteuid() != 0:
            raise SystemExit("cnichain-agent: must run as root (it runs CNI plugins for the runtime)")
        if self.cfg.log_file:
            self.log.open(self.cfg.log_file)
        started = time.perf_counter()
        self.plugins = load_plugins(self.cfg.extra_plugins)
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
        self.sel.register(self._wake_r, selectors.EVENT_READ, ("wake", None))
        metrics_socket = self.cfg.metrics_path
        if metrics_socket:
            self._listen_unix(metrics_socket, "metrics")
        if self.cfg.metrics_port:
            self._add_listener(sockets.listen_loopback(self.cfg.metrics_port), "metrics-tcp", "")
        # Last: once the CNI socket exists, shims use it.
        self._listen_unix(self.cfg.socket_path, "cni")
        self.log(f"serving on {self.cfg.socket_path}" + (f", metrics on {metrics_socket}" if metrics_socket else "")
                 + (f" and 127.0.0.1:{self.cfg.metrics_port}" if self.cfg.metrics_port else ""))

    def _listen_unix(self, path: str, kind: str) -> None:
        sock = sockets.listen_unix(path)
        self._add_listener(sock, kind, path, os.stat(path).st_ino)

    def _add_listener(self, sock: socket.socket, kind: str, path: str, inode: int = 0) -> None:
        sock.setblocking(False)
        self.listeners[sock.fileno()] = (sock, kind, path, inode)
        self.sel.register(sock, selectors.EVENT_READ, ("listen", kind))

    # -- signals and shutdown --------------------------------------------------------------
    def _on_signal(self, signum: int, _frame: Any) -> None:
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
        if self.draining:
            return
        self.draining = True
        self.drain_deadline = time.monotonic() + self.cfg.drain_limit
        self.log(f"draining ({why}): {len(self.children)} request(s) in flight")
        self._close_listeners()
        self._close_pool()
        for conn in list(self.conns.values()):
            if conn.kind == "cni" and conn.state in ("read", "go"):
                self._refuse(conn, "agent is shutting down", "draining")

    def _close_listeners(self) -> None:
        for sock, _kind, path, inode in list(self.listeners.values()):
            self._unregister(sock)
            if path:
                sockets.unlink_if_ours(path, inode)
            sock.close()
        self.listeners.clear()

    # -- the loop --------------------------------------------------------------------------
    def serve_forever(self) -> int:
        while not self.stop_now:
            if self.draining and not self.children:
                break
            now = time.monotonic()
            if self.draining and now >= self.drain_deadline:
                self.log(f"drain timeout: leaving {len(self.children)} worker(s) to answer on their own")
                break
            self._refill()
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
                    if key.data[0] == "conn" and key.data[1].state != "run":
                        self._close(key.data[1])
            self._handle_signals()
            self._expire(time.monotonic())
        self._close_listeners()
        self._close_pool()
        for conn in list(self.conns.values()):
            self._close(conn)
        self.log("stopped")
        return 0

    def _dispatch_event(self, key: selectors.SelectorKey) -> None:
        what, arg = key.data
        if what == "wake":
            self._drain_wakeups()
        elif what == "listen":
            self._accept(key.fileobj, arg)  # type: ignore[arg-type]
        elif what == "conn":
            self._readable(arg)
        elif what == "child":
            self._reap(arg)
        elif what == "idle-chan":
            self._idle_message(arg)
        elif what == "idle-exit":
            self._idle_exited(arg)

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

    # -- accepting: peer checks ------------------------------------------------------------------
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
            conn = Conn(sock, "metrics" if kind.startswith("metrics") else "cni")
            conn.deadline = time.monotonic() + READ_TIMEOUT
            if kind != "metrics-tcp" and not self._peer_is_root(conn):
                continue
            if conn.kind == "cni" and not self._admit(conn):
                continue
            sock.setblocking(False)
            self.conns[sock.fileno()] = conn
            self.sel.register(sock, selectors.EVENT_READ, ("conn", conn))

    def _peer_is_root(self, conn: Conn) -> bool:
        conn.pid, conn.uid = peer.peer_credentials(conn.sock)
        if conn.uid == 0:
            return True
        self.metrics.refuse("not root")
        self.log(f"refused connection from uid {conn.uid} pid {conn.pid}: not root")
        sockets.send_and_close(conn.sock, protocol.refusal(f"permission denied: peer uid {conn.uid} is not root"))
        return False

    def _admit(self, conn: Conn) -> bool:
        """Whether a CNI connection may proceed; takes hold of the caller's namespaces if so."""
        if self.draining:
            sockets.send_and_close(conn.sock, protocol.refusal("agent is shutting down"))
            return False
        if len(self.children) >= self.cfg.max_workers:
            self.metrics.refuse("busy")
            sockets.send_and_close(conn.sock, protocol.refusal("agent is at its worker limit"))
            return False
        try:  # now, before the peer could exit and its pid be reused
            conn.net_fd, conn.mnt_fd = peer.open_namespaces(conn.pid)
        except OSError as exc:
            self.metrics.refuse("peer namespace")
            sockets.send_and_close(conn.sock, protocol.refusal(f"cannot open the namespaces of pid {conn.pid}: {exc.strerror}"))
            return False
        return True

    # -- the handshake ---------------------------------------------------------------------------
    def _readable(self, conn: Conn) -> None:
        try:
            chunk = conn.sock.recv(65536)
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            chunk = b""
        if not chunk:
            # The shim went away before the go-ahead (its timeout, or it was killed): nothing ran.
            if conn.state != "run":
                self._close(conn)
            else:
                self._unregister(conn.sock)  # the worker still owns the reply
            return
        conn.buf += chunk
        if conn.kind == "metrics":
            if http_request_complete(bytes(conn.buf)):
                self._send_and_close(conn, http_response(bytes(conn.buf), self.metrics))
        elif conn.state == "read":
            self._try_request(conn)
        elif conn.state == "go":
            self._try_go(conn)
        elif conn.state == "run":
            conn.buf.clear()  # nothing more is expected; ignore chatter

    def _try_request(self, conn: Conn) -> None:
        try:
            frame = protocol.take_frame(conn.buf, self.cfg.max_request)
            if frame is None:
                return
            version, kind, payload = frame
            conn.payload = payload
            if version != shim.VERSION:
                raise Refusal(f"protocol version {version} is not supported (this agent speaks {shim.VERSION})")
            if kind != shim.REQUEST:
                raise RequestError(f"expected a request, got message kind {kind}")
            req = protocol.decode_request(payload, self.plugins)
            if req.netns_id != peer.ns_id(conn.net_fd):
                # The peer's pid now names another process (it exited and the pid was reused), or the
                # shim is not where it claims to be: do not guess, let it run cold.
                raise Refusal("the caller's network namespace could not be verified")
        except Refusal as exc:
            self._refuse(conn, str(exc), "protocol" if "protocol" in str(exc) else "unverified")
            return
        except (RequestError, ValueError) as exc:
            self.metrics.rejected += 1
            self.log(f"rejected request from pid {conn.pid}: {exc}")
            self._send_and_close(conn, protocol.error_result("cnichain agent: invalid request", str(exc),
                                                             Code.DECODING_FAILURE))
            return
        conn.req = req
        if req.command == "VERSION":
            self._answer_version(conn, req)
            return
        conn.state = "go"
        conn.deadline = time.monotonic() + GO_TIMEOUT
        try:
            conn.sock.sendall(protocol.ack(self.cfg.request_timeout))
        except OSError:
            self._close(conn)
            return
        if conn.buf:
            self._try_go(conn)

    def _try_go(self, conn: Conn) -> None:
        try:
            frame = protocol.take_frame(conn.buf, self.cfg.max_request)
        except (RequestError, ValueError):
            self._close(conn)
            return
        if frame is None:
            return
        _version, kind, _payload = frame
        if kind != shim.GO:
            self._close(conn)
            return
        self._start(conn)

    def _answer_version(self, conn: Conn, req: AgentRequest) -> None:
        """VERSION is a pure function of the plugin (no stdin, no namespace, no state): answered here,
        at once, with the RESULT in place of the ACK -- which both shims print, as for a rejected
        request -- instead of a worker entering the caller's namespaces to write the same line."""
        from cnichain.common.skel import dispatch

        started = time.monotonic()
        out, err = io.StringIO(), io.StringIO()
        code = dispatch(self.plugins[req.plugin_type], {"CNI_COMMAND": "VERSION"}, b"", out, err)
        elapsed = time.monotonic() - started
        self.metrics.done(req.plugin_type, req.command, "ok" if code == 0 else "error", elapsed)
        self.log(f"request plugin={req.plugin_type} command=VERSION container={req.container_id} exit={code} "
                 f"outcome={'ok' if code == 0 else 'error'} ms={elapsed * 1000:.1f} worker=none")
        self._send_and_close(conn, protocol.output_frame(code, out.getvalue(), err.getvalue()))

    # -- workers ---------------------------------------------------------------------------------
    def _start(self, conn: Conn) -> None:
        assert conn.req is not None
        plugin = self.plugins[conn.req.plugin_type]
        conn.state = "run"
        conn.started = time.monotonic()
        conn.deadline = conn.started + self.cfg.request_timeout + KILL_GRACE
        conn.sock.setblocking(True)
        pid, pidfd = self._take_pooled(conn)
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
        self.sel.register(conn.pidfd, selectors.EVENT_READ, ("child", conn))

    # -- the pool of pre-forked workers ------------------------------------------------------------
    def _take_pooled(self, conn: Conn) -> tuple[int, int]:
        """Hand ``conn``'s request to a warm pooled worker: (pid, pidfd), or (0, -1) when none can
        take it now (the caller forks one on the spot; a request never waits for the pool)."""
        if len(conn.payload) > pool.MAX_JOB:
            return 0, -1
        while True:
            idle = pool.next_ready(self.pool)
            if idle is None:
                return 0, -1
            self._forget_idle(idle)
            if pool.hand_over(idle, conn.payload, conn.sock, conn.net_fd, conn.mnt_fd):
                pidfd, idle.pidfd = idle.pidfd, -1  # now the request's worker; its pidfd moves to conn
                idle.close()
                return idle.pid, pidfd
            self._discard_idle(idle)  # it died between "ready" and now: try the next one

    def _refill(self) -> None:
        """Fork one pooled worker when the pool is short and no request is running.

        One per loop turn keeps the loop lively; waiting for a moment without running requests
        keeps the fork (~1 ms of the loop) and the worker's first steps from competing with them.
        Under sustained load the pool stays empty and requests fork their workers as before.
        """
        if (self.draining or self.children or len(self.pool) >= self.cfg.pool_size
                or time.monotonic() < self.pool_retry_at):
            return
        self.log.flush_before_fork()
        try:
            idle = pool.spawn(self.plugins, self.cfg.socket_path, self.cfg.request_timeout, self.cfg.fork_delegates)
        except OSError as exc:
            self.log(f"pool: cannot fork a worker: {exc}")
            self.pool_retry_at = time.monotonic() + 1.0
            return
        self.pool[idle.pidfd] = idle
        self.sel.register(idle.chan, selectors.EVENT_READ, ("idle-chan", idle))
        self.sel.register(idle.pidfd, selectors.EVENT_READ, ("idle-exit", idle))

    def _idle_message(self, idle: pool.Idle) -> None:
        try:
            msg = idle.chan.recv(64)
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            msg = b""
        if msg == pool.READY:
            idle.ready = True
        elif not msg:
            self._unregister(idle.chan)  # it is exiting; its pidfd tells when

    def _idle_exited(self, idle: pool.Idle) -> None:
        """A pooled worker left before it was given a request: something is wrong with warming."""
        self.log(f"pool: worker {idle.pid} exited before serving a request")
        self._forget_idle(idle)
        self._discard_idle(idle)
        self.pool_retry_at = time.monotonic() + 1.0

    def _forget_idle(self, idle: pool.Idle) -> None:
        self._unregister(idle.chan)
        self._unregister(idle.pidfd)
        self.pool.pop(idle.pidfd, None)

    def _discard_idle(self, idle: pool.Idle) -> None:
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

    def _close_pool(self) -> None:
        idles = list(self.pool.values())
        for idle in idles:  # all signalled first: a worker still warming at SCHED_IDLE may be slow to go
            self._forget_idle(idle)
            try:
                os.kill(idle.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        for idle in idles:
            self._discard_idle(idle)

    def _reap(self, conn: Conn) -> None:
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
        self._unregister(conn.pidfd)
        del self.children[conn.pidfd]
        os.close(conn.pidfd)
        conn.pidfd = -1
        self.metrics.inflight = len(self.children)
        self._close(conn)

    def _expire(self, now: float) -> None:
        for conn in list(self.conns.values()):
            if not conn.deadline or now < conn.deadline:
                continue
            if conn.state == "run":
                if conn.child and not conn.killed:
                    conn.killed = True
                    try:
                        os.kill(conn.child, signal.SIGKILL)
                    except ProcessLookupError:
                        pass
                conn.deadline = 0.0
            else:
                self._close(conn)  # a silent or slow client: its shim has gone cold already

    # -- helpers ---------------------------------------------------------------------------------
    def _unregister(self, fileobj: Any) -> None:
        try:
            self.sel.unregister(fileobj)
        except (KeyError, ValueError):
            pass

    def _refuse(self, conn: Conn, reason: str, label: str) -> None:
        self.metrics.refuse(label)
        self.log(f"refused request from pid {conn.pid}: {reason}")
        self._send_and_close(conn, protocol.refusal(reason))

    def _send_and_close(self, conn: Conn, data: bytes) -> None:
        sockets.send_quietly(conn.sock, data)
        self._close(conn)

    def _close(self, conn: Conn) -> None:
        fd = conn.sock.fileno()
        if fd >= 0 and self.conns.get(fd) is conn:
            del self.conns[fd]
            self._unregister(conn.sock)
        conn.close_ns_fds()
        if conn.pidfd >= 0:  # still running: keep tracking the worker, just forget the socket
            return
        conn.sock.close()


def serve(socket_path: str = shim.DEFAULT_SOCKET, **options: Any) -> int:
    """Run the agent in the foreground until SIGTERM/SIGINT (then drain); returns the exit code."""
    return run(AgentConfig(socket_path=socket_path, **options))


def run(config: AgentConfig) -> int:
    agent = Agent(config)
    agent.prepare()
    return agent.serve_forever()


def main(argv: Optional[list[str]] = None) -> int:
    """``python -m cnichain.cli.agent [options]``: the agent without typer."""
    from cnichain.cli.agent.config import parse_args

    return run(parse_args(argv))
