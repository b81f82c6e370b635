"""Long-lived workers: forked once, warm, serving one request after another, each from a clean home.

A process forked per request pays, inside the request, the fork and then a copy-on-write page
fault for every page of the agent's heap it writes to -- reference counts make that nearly every
object it touches, ~1,750 faults and ~25 ms of CPU for a request whose kernel work is well under a
millisecond.  A long-lived worker pays that once: after its first request the pages it touches are
its own, and the next request costs the handler and its kernel work.

A worker forked ahead of demand drops everything of the agent's it must not hold (listeners, other
clients' connections, signal handlers), warms itself at ``SCHED_IDLE`` priority and says "ready".
One forked for a request no idle worker could take skips warming and serves it at once.  Either
way it then loops: the agent sends it a REQUEST payload and, as SCM_RIGHTS, the accepted connection
and the caller's namespace descriptors over a private SOCK_SEQPACKET pair; the worker enters those
namespaces, runs the same dispatch a cold exec runs, writes the RESULT to the shim itself, goes
back to its home namespaces and state and verifies that it did (:mod:`home`), and only then
reports DONE -- with whether it stays.  It retires (reports, then exits) after ``max_requests``,
when its resident memory grew past its bound, or on any state a request left behind; a crash, a
hang (its alarm, or the agent's SIGKILL) or an exception ends it mid-request, and the agent answers
for it.  A request therefore always starts from the same verified state, or in a fresh process.
The agent's side of all this is :mod:`pool_keeper`'s.

Warming has two parts.  The agent's own :func:`~cnichain.agent.warmup.exercise` runs
lazily-initialised code once before any fork (pyroute2 message classes and socket set-up, each
plugin's VERSION and error path), so that state is built once and shared.  Each pooled worker then
runs the same exercise again (:func:`warm`): not to build anything, but to take its private copies
of the pages those paths write (reference counts), so those faults are paid before the request.
"""

from __future__ import annotations

import gc
import os
import resource
import signal
import socket
import struct
from typing import Any, Optional

from cnichain.agent import peer, worker
from cnichain.agent.home import Home
from cnichain.common.record import FrozenRecord

READY = b"ready"
# A job is one SOCK_SEQPACKET message, bounded by the socket buffer (~208 KiB by default).  Network
# configs are a few kB; a larger one (a huge prevResult) goes to a worker forked for it instead.
MAX_JOB = 64 << 10


# The worker's reports to the agent on its channel.  DONE carries the request's status (a
# worker.EXIT_* value), whether the worker stays (1) or retires (0), the CPU seconds and minor
# faults the request cost, and the reason when it retires.
DONE = b"done"
_DONE = struct.Struct("!BBdQ")

WARMING, IDLE, BUSY, RETIRING = "warming", "idle", "busy", "retiring"  # Worker.state


class Worker:
    """A long-lived worker as the agent sees it: pid, pidfd, channel, state and requests served."""

    __slots__ = ("pid", "pidfd", "chan", "state", "served", "conn")

    def __init__(self, pid: int, pidfd: int, chan: socket.socket, state: str) -> None:
        self.pid = pid
        self.pidfd = pidfd
        self.chan = chan
        self.state = state  # WARMING, IDLE, BUSY or RETIRING
        self.served = 0
        self.conn: Any = None  # the connection of the request it is serving (BUSY)

    @property
    def ready(self) -> bool:
        return self.state == IDLE

    def close(self) -> None:
        """Forget the worker: closing the channel tells an idle one to leave."""
        self.chan.close()
        if self.pidfd >= 0:
            os.close(self.pidfd)
            self.pidfd = -1


class Done(FrozenRecord):
    """A DONE report: the request's status, whether the worker stays, what the request cost."""

    __slots__ = _fields = ("status", "keep", "cpu", "faults", "reason")

    status: int
    keep: bool
    cpu: float
    faults: int
    reason: str

    def __init__(self, status: int, keep: bool, cpu: float, faults: int, reason: str) -> None:
        self._assign(status=status, keep=keep, cpu=cpu, faults=faults, reason=reason)


def encode_done(done: Done) -> bytes:
    return DONE + _DONE.pack(done.status, int(done.keep), done.cpu, done.faults) + done.reason.encode()


def decode_done(msg: bytes) -> Optional[Done]:
    """The DONE report in ``msg``, or None when ``msg`` is not one."""
    if not msg.startswith(DONE) or len(msg) < len(DONE) + _DONE.size:
        return None
    status, keep, cpu, faults = _DONE.unpack_from(msg, len(DONE))
    return Done(status, bool(keep), cpu, faults, msg[len(DONE) + _DONE.size:].decode("utf-8", "replace"))


class Limits(FrozenRecord):
    """When a worker retires on its own: after ``max_requests``, or past ``rss_growth`` bytes."""

    __slots__ = _fields = ("request_timeout", "max_requests", "rss_growth", "delegates_in_place", "socket_path")

    request_timeout: float
    max_requests: int
    rss_growth: int
    delegates_in_place: bool
    socket_path: str

    def __init__(self, request_timeout: float, max_requests: int, rss_growth: int, delegates_in_place: bool,
                 socket_path: str) -> None:
        self._assign(request_timeout=request_timeout, max_requests=max_requests, rss_growth=rss_growth,
                     delegates_in_place=delegates_in_place, socket_path=socket_path)


def spawn(plugins: dict[str, Any], limits: Limits, warm_first: bool) -> Worker:
    """Fork one worker (the caller flushes its buffers first); returns the agent's handle.

    ``warm_first``: warm up at idle priority and say "ready" before taking a request (a worker
    forked ahead of demand); otherwise the worker takes the request already queued on its channel
    at once (one forked for a request no idle worker could take).
    """
    ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET | socket.SOCK_CLOEXEC)
    pid = os.fork()
    if pid == 0:
        gc.freeze()  # first: what the agent built is never traversed (so never copied) by our collector
        status = worker.EXIT_FAILED
        try:
            ours.close()
            status = _worker_main(theirs, plugins, limits, warm_first)
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
    return Worker(pid, pidfd, ours, WARMING if warm_first else BUSY)


def hand_over(w: Worker, payload: bytes, conn: socket.socket, net_fd: int, mnt_fd: int) -> bool:
    """Give ``w`` a request; False when it cannot take it (it died meanwhile)."""
    if len(payload) > MAX_JOB:
        raise ValueError("request too large for a pooled worker")
    try:
        w.chan.settimeout(1.0)  # a ready worker is blocked in recvmsg: this never waits in practice
        sent = socket.send_fds(w.chan, [payload], [conn.fileno(), net_fd, mnt_fd])
    except OSError:
        return False
    return sent == len(payload)


def set_idle_priority(idle: bool) -> None:
    """SCHED_IDLE while warming (only spare CPU), the normal policy before any request runs."""
    try:
        os.sched_setscheduler(0, os.SCHED_IDLE if idle else os.SCHED_OTHER, os.sched_param(0))
    except (OSError, AttributeError):
        pass


def _worker_main(chan: socket.socket, plugins: dict[str, Any], limits: Limits, warm_first: bool) -> int:
    worker.detach({chan.fileno()})
    if warm_first:
        set_idle_priority(True)
        warm(plugins)
        set_idle_priority(False)
    else:
        worker.reset_process_state({})  # the agent's environment stays behind, as in a warmed one
    home = Home.capture()
    try:
        if warm_first:
            chan.sendall(READY)
        while True:
            msg, fds, _flags, _addr = socket.recv_fds(chan, MAX_JOB, 3)
            if not msg or len(fds) != 3:
                for fd in fds:
                    os.close(fd)
                return worker.EXIT_OK  # the agent closed the channel (drain, shutdown, trim)
            done = serve_one(home, plugins, limits, msg, fds)
            chan.send(encode_done(done), socket.MSG_NOSIGNAL)
            if not done.keep:
                return worker.EXIT_OK
    except OSError:
        return worker.EXIT_OK  # the agent is gone: whatever we served was answered already


def serve_one(home: Home, plugins: dict[str, Any], limits: Limits, msg: bytes, fds: list[int]) -> Done:
    """One request: enter its namespaces, dispatch, answer the shim, go home, check; its report.

    Any exception escapes to :func:`_worker_main`'s caller, which ends the process: the agent then
    sees a worker that died mid-request and answers for it, exactly as for a crash.
    """
    from cnichain.agent.delegates import DelegateRunner
    from cnichain.agent.protocol import decode_request

    before = resource.getrusage(resource.RUSAGE_SELF)
    conn_fd, net_fd, mnt_fd = fds
    conn = socket.socket(fileno=conn_fd)
    req = decode_request(msg, plugins)  # the agent validated these very bytes already
    worker.arm_alarm(limits.request_timeout)  # default action: terminate; bounds any hang
    try:
        home.enter(net_fd, mnt_fd, req.umask, req.env)
    finally:
        os.close(net_fd)
        os.close(mnt_fd)
    delegates = DelegateRunner(plugins, limits.socket_path) if limits.delegates_in_place else None
    status = worker.answer(conn, req, plugins[req.plugin_type], limits.request_timeout, delegates)
    conn.close()
    reason = home.leave()
    home.served += 1
    if not reason and limits.max_requests and home.served >= limits.max_requests:
        reason = f"served {home.served} requests"
    reason = reason or home.grown(limits.rss_growth)
    after = resource.getrusage(resource.RUSAGE_SELF)
    cpu = (after.ru_utime + after.ru_stime) - (before.ru_utime + before.ru_stime)
    return Done(status, not reason, cpu, after.ru_minflt - before.ru_minflt, reason)


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

    from cnichain.agent.warmup import exercise

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


def next_ready(pool: dict[int, Worker]) -> Optional[Worker]:
    """A ready worker from ``pool`` (pidfd -> Worker), or None when none is ready now."""
    for w in pool.values():
        if w.ready:
            return w
    return None
