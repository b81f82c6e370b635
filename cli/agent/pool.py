"""Workers forked before they are needed, so a request does not wait for a fork and its page faults.

A worker forked at the go-ahead pays, inside the request: the fork itself (~1 ms in the agent,
another ~1 ms before the child runs), and then a copy-on-write page fault for every page of the
agent's heap it writes to -- reference counts make that nearly every object it touches, thousands
of faults at ~2.5 us each.  A pooled worker pays all of that earlier: the agent forks it while
idle, the worker drops everything of the agent's it must not hold (listeners, other clients'
connections, signal handlers), warms itself at ``SCHED_IDLE`` priority -- so warming only ever uses
CPU time nobody else wants -- and then says "ready" and blocks.

At the go-ahead the agent sends the ready worker the REQUEST payload and, as SCM_RIGHTS, the
accepted connection and the caller's namespace descriptors, over a private SOCK_SEQPACKET pair.
From there the worker does exactly what a freshly forked one does (:func:`worker.run`): one
request, then exit.  Isolation is unchanged: a pooled worker has served nobody before, and it never
serves anybody after.  The agent reaps it like any other worker and forks a replacement when the
loop has nothing else to do; that bookkeeping on the agent's side is :mod:`pool_keeper`'s.

Warming has two parts.  The agent's own :func:`~cnichain.cli.agent.warmup.exercise` runs
lazily-initialised code once before any fork (pyroute2 message classes and socket set-up, each
plugin's VERSION and error path), so that state is built once and shared.  Each pooled worker then
runs the same exercise again (:func:`warm`): not to build anything, but to take its private copies
of the pages those paths write (reference counts), so those faults are paid before the request.
"""

from __future__ import annotations

import gc
import os
import signal
import socket
from typing import Any, Optional

from cnichain.cli.agent import peer, worker

READY = b"ready"
# A job is one SOCK_SEQPACKET message, bounded by the socket buffer (~208 KiB by default).  Network
# configs are a few kB; a larger one (a huge prevResult) goes to a worker forked for it instead.
MAX_JOB = 64 << 10


class Idle:
    """A pooled worker as the agent sees it: its pid, pidfd, channel, and whether it is warm yet."""

    __slots__ = ("pid", "pidfd", "chan", "ready")

    def __init__(self, pid: int, pidfd: int, chan: socket.socket) -> None:
        self.pid = pid
        self.pidfd = pidfd
        self.chan = chan
        self.ready = False

    def close(self) -> None:
        """Forget the worker: closing the channel tells an idle one to leave."""
        self.chan.close()
        if self.pidfd >= 0:
            os.close(self.pidfd)
            self.pidfd = -1


def spawn(plugins: dict[str, Any], socket_path: str, limit: float, fork_delegates: bool) -> Idle:
    """Fork one pooled worker (the caller flushes its buffers first); returns the agent's handle."""
    ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET | socket.SOCK_CLOEXEC)
    pid = os.fork()
    if pid == 0:
        status = worker.EXIT_FAILED
        try:
            ours.close()
            status = _idle_main(theirs, plugins, socket_path, limit, fork_delegates)
        except BaseException:  # noqa: BLE001 - the agent reports it; never unwind into its loop
            status = worker.EXIT_FAILED
        finally:
            os._exit(status)
    theirs.close()
    try:
        pidfd = os.pidfd_open(pid)
    except OSError:
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
        ours.close()
        raise
    return Idle(pid, pidfd, ours)


def hand_over(idle: Idle, payload: bytes, conn: socket.socket, net_fd: int, mnt_fd: int) -> bool:
    """Give ``idle`` its one request; False when it cannot take it (it died meanwhile)."""
    if len(payload) > MAX_JOB:
        raise ValueError("request too large for a pooled worker")
    try:
        idle.chan.settimeout(1.0)  # a ready worker is blocked in recvmsg: this never waits in practice
        sent = socket.send_fds(idle.chan, [payload], [conn.fileno(), net_fd, mnt_fd])
    except OSError:
        return False
    return sent == len(payload)


def set_idle_priority(idle: bool) -> None:
    """SCHED_IDLE while warming (only spare CPU), the normal policy before any request runs."""
    try:
        os.sched_setscheduler(0, os.SCHED_IDLE if idle else os.SCHED_OTHER, os.sched_param(0))
    except (OSError, AttributeError):
        pass


def _idle_main(chan: socket.socket, plugins: dict[str, Any], socket_path: str, limit: float,
               fork_delegates: bool) -> int:
    set_idle_priority(True)
    worker.detach({chan.fileno()})
    warm(plugins)
    set_idle_priority(False)
    try:
        chan.sendall(READY)
        msg, fds, _flags, _addr = socket.recv_fds(chan, MAX_JOB, 3)
    except OSError:
        return worker.EXIT_OK  # the agent is gone: nothing was asked of us
    chan.close()
    if not msg or len(fds) != 3:
        for fd in fds:
            os.close(fd)
        return worker.EXIT_OK  # the agent closed the channel (drain, shutdown): leave quietly
    from cnichain.cli.agent.delegates import DelegateRunner
    from cnichain.cli.agent.protocol import decode_request

    conn = socket.socket(fileno=fds[0])
    req = decode_request(msg, plugins)  # the agent validated these very bytes already
    delegates = DelegateRunner(plugins, socket_path, limit) if fork_delegates else None
    return worker.run(conn, req, plugins[req.plugin_type], fds[1], fds[2], limit, delegates)


def warm(plugins: dict[str, Any]) -> None:
    """Touch, in this worker, the pages every request touches first, so their copy-on-write faults
    happen now rather than inside the request; then keep what that allocated out of its collections.

    The same side-effect-free exercise the agent ran before forking (:func:`warmup.exercise`): a
    read-only netlink socket in the agent's namespace, each plugin's VERSION and a refused ADD.
    Copying *every* shared page instead (``madvise(MADV_POPULATE_WRITE)``) was measured too: it
    removes the remaining faults but costs ~12 ms of CPU and ~24 MB per pooled worker, and a
    slower exit for each -- more than it saves on a busy node.
    """
    import io
    import sys

    from cnichain.cli.agent.warmup import exercise

    saved = sys.stdout, sys.stderr
    sys.stdout, sys.stderr = io.StringIO(), io.StringIO()
    try:
        exercise(plugins)
    finally:
        sys.stdout, sys.stderr = saved
    # The per-request steps before the plugin runs, rehearsed here for the same reason: entering
    # namespaces (its own: a no-op) and emptying the environment (the request brings its own; an
    # idle worker needs none) write pages that would otherwise be copied inside the request.
    peer.rehearse()
    worker.reset_process_state({})
    gc.freeze()


def next_ready(pool: dict[int, Idle]) -> Optional[Idle]:
    """A warm worker from ``pool`` (pidfd -> Idle), or None when none is ready yet."""
    for idle in pool.values():
        if idle.ready:
            return idle
    return None
