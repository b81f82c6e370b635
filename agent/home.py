"""A long-lived worker's home: the state it starts every request from, the way back, and the proof.

A worker serves many requests, each inside its caller's network and mount namespaces with the
request's environment and umask.  Isolation between requests then rests on one rule: after every
request the worker goes back to the state it had before the first one, checks that it did, and
is replaced when it did not (or when the request left anything it did not start with).

:meth:`Home.capture` records that state once, when the worker is ready: descriptors to its own
network and mount namespaces (so returning is a ``setns``, never a path lookup in a namespace a
plugin may have changed), the namespaces' identities, the root directory, the set of open
descriptors, the thread count, the signal dispositions, the environment, the umask, stdout/stderr
and its resident memory.  Per request, :meth:`Home.enter` sets up the request's state and
remembers it; :meth:`Home.leave` first compares the process with that state (a request that
changed its namespaces, cwd, umask or environment, opened a descriptor it did not close, started a thread or
installed a signal handler has left something behind: the worker is replaced, even though the
way back would undo most of it), then goes home and verifies every item against the capture.
Either returns a reason, and a non-empty reason retires the worker; the request itself was
already answered, so the reason only goes to the agent's log.
"""

from __future__ import annotations

import os
import resource
import signal
import sys
from typing import Any

from cnichain.agent import peer

# Signals whose disposition a request must not change (default, or ignored where detach set it).
WATCHED_SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGALRM, signal.SIGCHLD, signal.SIGPIPE,
                   signal.SIGUSR1, signal.SIGUSR2, signal.SIGQUIT)


def open_fds() -> frozenset[int]:
    """The descriptors this process has open (the listing's own descriptor excluded)."""
    return frozenset(int(name) for name in os.listdir("/proc/self/fd")) - _listing_fd()


def _listing_fd() -> frozenset[int]:
    # listdir opens one descriptor for the directory while reading it: it shows up in its own
    # listing.  It is the lowest free one, which is what a fresh os.open returns; ask the kernel.
    fd = os.open("/", os.O_RDONLY | os.O_CLOEXEC)
    os.close(fd)
    return frozenset((fd,))


def thread_count() -> int:
    """Kernel tasks of this process (a thread any library started counts, not only Python's)."""
    return len(os.listdir("/proc/self/task"))


def rss_bytes() -> int:
    """Resident memory, from /proc/self/statm (pages)."""
    with open("/proc/self/statm", "rb") as fh:
        return int(fh.read().split()[1]) * resource.getpagesize()


def current_umask() -> int:
    mask = os.umask(0o077)
    os.umask(mask)
    return mask


class Home:
    """What the worker returns to after each request, and the checks that it did."""

    net_fd: int
    mnt_fd: int
    net_id: tuple[int, int]
    mnt_id: tuple[int, int]
    root_id: tuple[int, int]
    fds: frozenset[int]
    threads: int
    signals: tuple[Any, ...]
    env: dict[str, str]
    umask: int
    streams: tuple[Any, Any]
    rss: int
    expected: dict[str, Any]  # what the current request started with
    served: int  # requests served from this home so far

    @classmethod
    def capture(cls) -> Home:
        """Record the worker's state now (between detach and its first request); cwd becomes /."""
        home = cls()
        os.chdir("/")
        home.net_fd = os.open("/proc/self/ns/net", os.O_RDONLY | os.O_CLOEXEC)
        home.mnt_fd = os.open("/proc/self/ns/mnt", os.O_RDONLY | os.O_CLOEXEC)
        home.net_id = peer.ns_id(home.net_fd)
        home.mnt_id = peer.ns_id(home.mnt_fd)
        home.root_id = peer.ns_id("/")
        home.fds = open_fds()
        home.threads = thread_count()
        home.signals = tuple(signal.getsignal(s) for s in WATCHED_SIGNALS)
        home.env = dict(os.environ)
        home.umask = current_umask()
        home.streams = (sys.stdout, sys.stderr)
        home.rss = rss_bytes()
        home.expected = {}
        home.served = 0
        return home

    def enter(self, net_fd: int, mnt_fd: int, umask: int, env: dict[str, str]) -> None:
        """Move into the request's namespaces and state; what :meth:`leave` will compare against."""
        from cnichain.agent import worker

        peer.enter(net_fd, mnt_fd)
        os.chdir("/")
        os.umask(umask)
        worker.reset_process_state(env)
        self.expected = {"umask": umask, "env": dict(os.environ), "net": peer.ns_id(net_fd), "mnt": peer.ns_id(mnt_fd)}

    def leave(self) -> str:
        """Compare with what the request started with, go home, verify; "" when all is as before.

        The worker has closed its own descriptors for the request (connection, namespaces) by now.
        Going home is attempted even after a finding, so that the process is in a sane state for
        the little it still does (report, exit).
        """
        self._release()
        try:
            found = self._left_behind()
        except OSError as exc:
            found = f"cannot inspect the state the request left: {exc}"
        try:
            self._go_home()
        except OSError as exc:
            return found or f"cannot return to the worker's namespaces: {exc}"
        try:
            return found or self._verify()
        except OSError as exc:
            return f"cannot verify the worker's state: {exc}"

    def _left_behind(self) -> str:
        if peer.ns_id("/proc/thread-self/ns/net") != self.expected.get("net"):
            return "the request left its network namespace"
        if peer.ns_id("/proc/self/ns/mnt") != self.expected.get("mnt"):
            return "the request left its mount namespace"
        if os.getcwd() != "/":
            return f"the request changed the working directory to {os.getcwd()!r}"
        if current_umask() != self.expected.get("umask"):
            return f"the request changed the umask to {current_umask():04o}"
        if dict(os.environ) != self.expected.get("env"):
            return "the request changed the environment"
        if thread_count() != self.threads:
            return f"the request left {thread_count() - self.threads} thread(s) running"
        extra = open_fds() - self.fds
        if extra:
            return f"the request left descriptor(s) {sorted(extra)} open"
        if tuple(signal.getsignal(s) for s in WATCHED_SIGNALS) != self.signals:
            return "the request changed a signal disposition"
        return ""

    def _release(self) -> None:
        """Drop what the request's code may keep by design, before anything is compared: the
        alarm, the captured streams, the delegate runner, the per-network log settings, and the
        libnftables context, whose netlink socket belongs to the request's namespace."""
        from cnichain.common import invoke, nft
        from cnichain.common import log as log_mod

        signal.alarm(0)
        sys.stdout, sys.stderr = self.streams
        nft.reset()
        invoke.delegate_runner = None
        log_mod.log.__init__()  # type: ignore[misc]

    def _go_home(self) -> None:
        if thread_count() == 1 and peer.ns_id("/proc/self/ns/mnt") != self.mnt_id:
            peer.setns(self.mnt_fd, peer.CLONE_NEWNS)  # also resets root and cwd to the namespace's
        peer.setns(self.net_fd, peer.CLONE_NEWNET)
        os.chdir("/")
        os.umask(self.umask)
        for key in list(os.environ):
            del os.environ[key]
        os.environ.update(self.env)

    def _verify(self) -> str:
        """Every item of the capture, checked again (the first difference is the reason)."""
        if peer.ns_id("/proc/thread-self/ns/net") != self.net_id:
            return "still in the request's network namespace"
        if peer.ns_id("/proc/self/ns/mnt") != self.mnt_id:
            return "still in the request's mount namespace"
        if peer.ns_id("/") != self.root_id:
            return "the root directory is not the worker's own"
        if os.getcwd() != "/" or current_umask() != self.umask or dict(os.environ) != self.env:
            return "cwd, umask or environment not restored"
        if open_fds() != self.fds:
            return f"open descriptors differ from the worker's own: {sorted(open_fds() ^ self.fds)}"
        if thread_count() != self.threads:
            return "thread count differs from the worker's own"
        if (sys.stdout, sys.stderr) != self.streams:
            return "stdout/stderr not restored"
        return ""

    def grown(self, limit: int) -> str:
        """A reason to retire when resident memory grew more than ``limit`` bytes since capture."""
        now = rss_bytes()
        if limit and now - self.rss > limit:
            return f"resident memory grew by {(now - self.rss) >> 20} MiB"
        return ""
