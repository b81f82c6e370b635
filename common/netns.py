"""Entering network namespaces by path, never creating one.

CNI hands plugins a path (``/var/run/netns/x`` or ``/proc/PID/ns/net``).  A missing path must be
reported, not created: pyroute2's own netns helpers default to ``O_CREAT``, so plugins come here.
Entering is per thread (``setns`` changes only the calling thread), which is what lets a test or
the agent run several requests at once in different namespaces.
"""

from __future__ import annotations

import errno
import os

from .errors import CniError, Code

CLONE_NEWNET = 0x40000000
_libc = None


class NetnsGone(CniError):
    """The namespace path does not exist (any more): DEL treats this as "already cleaned up"."""


def _setns(fd: int) -> None:
    setns = getattr(os, "setns", None)  # Python >= 3.12
    if setns is not None:
        setns(fd, CLONE_NEWNET)
        return
    global _libc
    if _libc is None:
        import ctypes

        _libc = ctypes.CDLL(None, use_errno=True)
    if _libc.setns(fd, CLONE_NEWNET) != 0:
        err = ctypes_errno()
        raise OSError(err, os.strerror(err))


def ctypes_errno() -> int:
    import ctypes

    return ctypes.get_errno()


def open_netns(path: str) -> int:
    """An fd for the namespace at ``path``; NetnsGone when it does not exist."""
    if not path or "\0" in path:
        raise CniError(Code.INVALID_NETNS, f"invalid netns path {path!r}")
    try:
        return os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    except FileNotFoundError:
        raise NetnsGone(Code.INVALID_NETNS, f'failed to open netns "{path}": no such file or directory') from None
    except OSError as exc:
        raise CniError(Code.INVALID_NETNS, f'failed to open netns "{path}": {exc.strerror}') from None


class entered:
    """Run the body of a ``with`` with the calling thread inside the namespace at ``path``.

    A small class rather than a ``contextlib`` generator: ``contextlib`` costs ~1 ms of import on
    every exec of the lean plugins (tuning's sysctls) that enter a namespace and nothing else.
    Errors (path missing, not a network namespace) are raised by ``__enter__``, so the body never
    runs in the wrong namespace.
    """

    __slots__ = ("path", "_fds")

    def __init__(self, path: str) -> None:
        self.path = path
        self._fds: list[tuple[int, int]] = []  # (target, origin) per active entry

    def __enter__(self) -> None:
        target = open_netns(self.path)
        try:
            origin = os.open("/proc/thread-self/ns/net", os.O_RDONLY | os.O_CLOEXEC)
        except BaseException:
            os.close(target)
            raise
        try:
            _setns(target)
        except OSError as exc:
            os.close(origin)
            os.close(target)
            code = Code.INVALID_NETNS
            if exc.errno == errno.EINVAL:
                raise CniError(code, f'"{self.path}" is not a network namespace') from None
            raise CniError(code, f'failed to enter netns "{self.path}": {exc.strerror}') from None
        self._fds.append((target, origin))

    def __exit__(self, *exc_info: object) -> None:
        target, origin = self._fds.pop()
        try:
            _setns(origin)
        finally:
            os.close(origin)
            os.close(target)


def same_netns(a: str, b: str) -> bool:
    try:
        sa, sb = os.stat(a), os.stat(b)
    except OSError:
        return False
    return (sa.st_dev, sa.st_ino) == (sb.st_dev, sb.st_ino)
