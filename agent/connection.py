"""One accepted connection and the handshake state it is in: the agent's per-connection state machine.

A CNI connection moves ``read`` (waiting for the REQUEST) -> ``go`` (ACK sent, waiting for GO) ->
``run`` (a worker owns the reply), and never back: once a shim is told GO it must not also run cold,
so a connection in ``run`` is only ever closed by its worker's exit.  A metrics connection stays in
``read`` until it has a whole HTTP request, is answered and closed.  The legal moves are stated
once, in :data:`LEGAL`; the deadline of each state is chosen once, in :func:`deadline_for`.  Every
state has one, so a silent client or a hung worker costs one slot for a bounded time.

Kept apart from the event loop so the rules can be read -- and tested -- without a selector, a
socket that answers, or a fork.
"""

from __future__ import annotations

import os
import socket
from typing import Optional

from cnichain.agent.config import GO_TIMEOUT, KILL_GRACE, READ_TIMEOUT
from cnichain.agent.protocol import AgentRequest

# States (plain strings: they appear as-is in messages and are cheap to compare).
READ = "read"  # accepted; the REQUEST (or an HTTP request) is still being read
GO = "go"  # ACK sent; waiting for the shim's GO
WAIT = "wait"  # told GO, queued for a worker (every one is busy); closing it sends its shim cold
RUN = "run"  # a worker has the connection and writes the answer itself

# Kinds: which listener the connection came from.
CNI = "cni"
METRICS = "metrics"

# The legal moves, stated once: forward only, one step at a time.
LEGAL: dict[str, frozenset[str]] = {READ: frozenset({GO}), GO: frozenset({WAIT, RUN}), WAIT: frozenset({RUN}),
                                    RUN: frozenset()}


class IllegalTransition(RuntimeError):
    """A move :data:`LEGAL` does not allow: a bug in the agent, never the client's doing."""


def deadline_for(state: str, since: float, request_timeout: float) -> float:
    """When a connection that entered ``state`` at ``since`` (monotonic) has overstayed.

    ``read`` and ``go`` wait on the client (closing it then only sends its shim cold), ``wait`` on a
    worker to become free (its bound is passed as ``request_timeout``: closing it too only sends
    its shim cold, since nothing ran); ``run`` waits
    on the worker, whose own alarm fires at ``request_timeout``: the server kills it a grace period
    after that in case the alarm was blocked.
    """
    if state == READ:
        return since + READ_TIMEOUT
    if state == GO:
        return since + GO_TIMEOUT
    if state == WAIT:
        return since + request_timeout  # here: the queue's wait bound (nothing runs yet)
    if state == RUN:
        return since + request_timeout + KILL_GRACE
    raise IllegalTransition(f"no such connection state: {state!r}")


class Conn:
    """One accepted connection: its peer, its namespaces, its buffer, and where it is in the handshake."""

    __slots__ = ("sock", "kind", "pid", "uid", "net_fd", "mnt_fd", "buf", "state", "deadline",
                 "req", "payload", "child", "pidfd", "pooled", "started", "killed")

    sock: socket.socket
    kind: str  # CNI or METRICS
    pid: int  # the peer's, from SO_PEERCRED
    uid: int
    net_fd: int  # the peer's namespaces, held from accept until a worker has them
    mnt_fd: int
    buf: bytearray  # bytes received and not yet parsed
    state: str  # READ, GO, WAIT or RUN
    deadline: float  # monotonic; 0.0: none (a killed worker, waiting to be reaped)
    req: Optional[AgentRequest]
    payload: bytes  # the REQUEST payload as received, for a pooled worker to decode
    child: int  # the worker's pid once in RUN
    pidfd: int  # the worker's pidfd while it runs; -1 otherwise
    pooled: bool  # the worker came from the pool (for the log)
    started: float  # monotonic time of the GO (the move to WAIT or RUN)
    killed: bool  # the server sent the worker SIGKILL at its deadline

    def __init__(self, sock: socket.socket, kind: str, now: float) -> None:
        self.sock = sock
        self.kind = kind
        self.pid = self.uid = 0
        self.net_fd = self.mnt_fd = -1
        self.buf = bytearray()
        self.state = READ
        self.deadline = deadline_for(READ, now, 0.0)
        self.req = None
        self.payload = b""
        self.child = 0
        self.pidfd = -1
        self.pooled = False
        self.started = 0.0
        self.killed = False

    @property
    def handshaking(self) -> bool:
        """A CNI connection not yet told GO: refusing it now only sends its shim cold."""
        return self.kind == CNI and self.state in (READ, GO)

    @property
    def running(self) -> bool:
        """A worker owns the reply: the connection must not be closed under it."""
        return self.state == RUN

    def acked(self, now: float) -> None:
        """READ -> GO: the REQUEST was accepted and the ACK is being sent."""
        self._move(GO, now, 0.0)

    @property
    def waiting(self) -> bool:
        """Told GO and queued for a worker: nothing ran yet, closing it sends its shim cold."""
        return self.state == WAIT

    def wait(self, now: float, queue_wait: float) -> None:
        """GO -> WAIT: every worker the budget allows is busy; queued for at most ``queue_wait``."""
        self._move(WAIT, now, queue_wait)
        self.started = now  # a request's time counts from its GO, queue included

    def run(self, now: float, request_timeout: float) -> None:
        """GO (or WAIT) -> RUN: a worker is being given the request."""
        queued = self.state == WAIT
        self._move(RUN, now, request_timeout)
        if not queued:
            self.started = now

    def disarm(self) -> None:
        """No more deadline: the worker was killed and only its reaping is left."""
        self.deadline = 0.0

    def _move(self, to: str, now: float, request_timeout: float) -> None:
        if to not in LEGAL[self.state]:
            raise IllegalTransition(f"{self.kind} connection cannot move from {self.state!r} to {to!r}")
        self.state = to
        self.deadline = deadline_for(to, now, request_timeout)

    def close_ns_fds(self) -> None:
        """Let go of the peer's namespaces (a worker has its own copies, or none is coming)."""
        if self.net_fd >= 0:
            os.close(self.net_fd)
            self.net_fd = -1
        if self.mnt_fd >= 0:
            os.close(self.mnt_fd)
            self.mnt_fd = -1
