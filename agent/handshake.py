"""What the agent does with a connection before a worker owns it: admit it, read the REQUEST, ACK,
wait for GO -- or answer it at once (VERSION, metrics, a refusal, a rejected request).

The moves between states are :mod:`connection`'s; this module decides *when* to make them, from
the bytes received, and what to send.  Until GO, closing the connection is always safe: the shim
runs the plugin cold.  VERSION, a pure function of the plugin, is answered here in place of the ACK
(no worker, no namespace entry).  A metrics connection gets one HTTP answer and is closed.

Kept out of the event loop, which only knows that a connection became readable; the loop lends
this module its way to close a connection and its way to start a worker.
"""

from __future__ import annotations

import io
import time
from typing import Callable

from cnichain.agent import peer, protocol, sockets
from cnichain.agent.config import AgentConfig
from cnichain.agent.connection import GO, METRICS, READ, RUN, Conn
from cnichain.agent.log import AgentLog
from cnichain.agent.metrics import Metrics, http_request_complete, http_response
from cnichain.agent.protocol import AgentRequest, Refusal, RequestError
from cnichain.common import shim
from cnichain.common.errors import Code

TYPE_CHECKING = False
if TYPE_CHECKING:
    from cnichain.common.skel import Plugin


class Handshake:
    """Admission checks and the REQUEST/ACK/GO exchange, over connections the event loop owns."""

    cfg: AgentConfig
    plugins: dict[str, Plugin]
    metrics: Metrics
    log: AgentLog
    close: Callable[[Conn], None]  # the loop's: forget the connection and close what it holds
    start: Callable[[Conn], None]  # the loop's: give a connection told GO to a worker

    def __init__(self, cfg: AgentConfig, plugins: dict[str, Plugin], metrics: Metrics, log: AgentLog,
                 close: Callable[[Conn], None], start: Callable[[Conn], None]) -> None:
        self.cfg = cfg
        self.plugins = plugins
        self.metrics = metrics
        self.log = log
        self.close = close
        self.start = start

    # -- admission, at accept ----------------------------------------------------------------------
    def peer_is_root(self, conn: Conn) -> bool:
        """Whether the peer is root (every caller of the CNI or metrics unix socket must be)."""
        conn.pid, conn.uid = peer.peer_credentials(conn.sock)
        if conn.uid == 0:
            return True
        self.metrics.refuse("not root")
        self.log(f"refused connection from uid {conn.uid} pid {conn.pid}: not root")
        sockets.send_and_close(conn.sock, protocol.refusal(f"permission denied: peer uid {conn.uid} is not root"))
        return False

    def admit(self, conn: Conn, draining: bool, taken: int) -> bool:
        """Whether a CNI connection may proceed; takes hold of the caller's namespaces if so.

        Refused when ``taken`` (requests running plus waiting) already fill the capacity and the
        queue: this one would only wait longer than running cold."""
        if draining:
            sockets.send_and_close(conn.sock, protocol.refusal("agent is shutting down"))
            return False
        if taken >= self.cfg.max_workers + self.cfg.queue_size:
            self.metrics.refuse("busy")
            sockets.send_and_close(conn.sock, protocol.refusal("agent's queue is full"))
            return False
        try:  # now, before the peer could exit and its pid be reused
            conn.net_fd, conn.mnt_fd = peer.open_namespaces(conn.pid)
        except OSError as exc:
            self.metrics.refuse("peer namespace")
            sockets.send_and_close(conn.sock, protocol.refusal(f"cannot open the namespaces of pid {conn.pid}: {exc.strerror}"))
            return False
        return True

    # -- bytes received ----------------------------------------------------------------------------
    def received(self, conn: Conn, chunk: bytes) -> None:
        """Act on ``chunk``, just read from ``conn`` (never empty: end-of-stream is the loop's)."""
        conn.buf += chunk
        if conn.kind == METRICS:
            if http_request_complete(bytes(conn.buf)):
                self.send_and_close(conn, http_response(bytes(conn.buf), self.metrics))
        elif conn.state == READ:
            self._try_request(conn)
        elif conn.state == GO:
            self._try_go(conn)
        elif conn.state == RUN:
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
            self.refuse(conn, str(exc), "protocol" if "protocol" in str(exc) else "unverified")
            return
        except (RequestError, ValueError) as exc:
            self.metrics.rejected += 1
            self.log(f"rejected request from pid {conn.pid}: {exc}")
            self.send_and_close(conn, protocol.error_result("cnichain agent: invalid request", str(exc),
                                                            Code.DECODING_FAILURE))
            return
        conn.req = req
        if req.command == "VERSION":
            self._answer_version(conn, req)
            return
        conn.acked(time.monotonic())
        try:
            conn.sock.sendall(protocol.ack(self.cfg.request_timeout))
        except OSError:
            self.close(conn)
            return
        if conn.buf:
            self._try_go(conn)

    def _try_go(self, conn: Conn) -> None:
        try:
            frame = protocol.take_frame(conn.buf, self.cfg.max_request)
        except (RequestError, ValueError):
            self.close(conn)
            return
        if frame is None:
            return
        _version, kind, _payload = frame
        if kind != shim.GO:
            self.close(conn)
            return
        self.start(conn)

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
        self.send_and_close(conn, protocol.output_frame(code, out.getvalue(), err.getvalue()))

    # -- answers that end the connection -------------------------------------------------------------
    def refuse(self, conn: Conn, reason: str, label: str) -> None:
        """Refuse a connection not yet told GO (its shim runs cold), counted under ``label``."""
        self.metrics.refuse(label)
        self.log(f"refused request from pid {conn.pid}: {reason}")
        self.send_and_close(conn, protocol.refusal(reason))

    def send_and_close(self, conn: Conn, data: bytes) -> None:
        """The last words on a connection no worker owns: send what fits, then close it."""
        sockets.send_quietly(conn.sock, data)
        self.close(conn)

