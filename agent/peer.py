"""Who is calling, and which namespaces the request must run in.

The agent trusts only root callers (SO_PEERCRED, checked at accept) and runs each request in the
caller's own network and mount namespaces.  Those are opened from ``/proc/<pid>/ns`` the moment the
connection is accepted -- before the caller could exit and its pid be reused -- and later compared
with the namespace the shim says it is in (:func:`ns_id`), so a request never runs somewhere its
caller is not.  The worker then enters them with :func:`setns`.
"""

from __future__ import annotations

import os
import socket
import struct
from typing import Any, Union

CLONE_NEWNS = 0x00020000
CLONE_NEWNET = 0x40000000

_libc: Any = None


def peer_credentials(sock: socket.socket) -> tuple[int, int]:
    """(pid, uid) of the process at the other end of a unix stream socket, as the kernel saw it."""
    pid, uid, _gid = struct.unpack("3i", sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, 12))
    return pid, uid


def open_namespaces(pid: int) -> tuple[int, int]:
    """(network, mount) namespace fds of ``pid``, close-on-exec; OSError when it cannot be done.

    Both or neither: a failure on the second closes the first.
    """
    net_fd = os.open(f"/proc/{pid}/ns/net", os.O_RDONLY | os.O_CLOEXEC)
    try:
        mnt_fd = os.open(f"/proc/{pid}/ns/mnt", os.O_RDONLY | os.O_CLOEXEC)
    except OSError:
        os.close(net_fd)
        raise
    return net_fd, mnt_fd


def ns_id(fd_or_path: Union[int, str]) -> tuple[int, int]:
    """(device, inode): what identifies a namespace, from an open fd or a /proc path."""
    st = os.stat(fd_or_path) if isinstance(fd_or_path, str) else os.fstat(fd_or_path)
    return st.st_dev, st.st_ino


def setns(fd: int, nstype: int) -> None:
    """Move the calling thread into the namespace ``fd`` refers to (os.setns where Python has it)."""
    global _libc
    if hasattr(os, "setns"):
        os.setns(fd, nstype)
        return
    import ctypes

    if _libc is None:
        _libc = ctypes.CDLL(None, use_errno=True)
    if _libc.setns(fd, nstype) != 0:
        err = ctypes.get_errno()
        raise OSError(err, os.strerror(err))


def rehearse() -> None:
    """Run :func:`enter` once on this process's own namespaces (a no-op move).

    Called where the first real request must not pay for first use: in the agent before it forks
    (so every worker inherits libc already resolved, ~0.2 ms otherwise) and in each pooled worker
    while it warms up (so the pages this path writes are its own already, not copied at request
    time).  ``/proc/self`` names this very process, so nothing is entered that it is not in.
    """
    net_fd = os.open("/proc/self/ns/net", os.O_RDONLY | os.O_CLOEXEC)
    try:
        mnt_fd = os.open("/proc/self/ns/mnt", os.O_RDONLY | os.O_CLOEXEC)
        try:
            enter(net_fd, mnt_fd)
        finally:
            os.close(mnt_fd)
    finally:
        os.close(net_fd)


def enter(net_fd: int, mnt_fd: int) -> None:
    """Enter the caller's mount namespace (only when it is not ours already, the common case) and
    then its network namespace, so the plugin sees the same /run, /var/lib and links as a cold exec."""
    if ns_id(mnt_fd) != ns_id("/proc/self/ns/mnt"):
        setns(mnt_fd, CLONE_NEWNS)
    setns(net_fd, CLONE_NEWNET)
