"""Unix sockets the agent listens on, and the small send-and-forget writes it does on them.

The CNI socket is what every plugin exec on the node tries first, so its path must never show a
half-set-up socket, must be root-only from the moment it exists, and must not be taken over from
an agent that is still serving.  :func:`listen_unix` gives those three guarantees.
"""

from __future__ import annotations

import os
import socket

PROBE_TIMEOUT = 0.5
SEND_TIMEOUT = 1.0


def ensure_private_dir(path: str) -> None:
    """Create the socket directory root-only, or refuse one that others could write."""
    os.makedirs(path, mode=0o700, exist_ok=True)
    st = os.stat(path)
    if st.st_uid != 0 or st.st_mode & 0o022:
        raise SystemExit(f"cnichain-agent: {path} must be owned by root and not group/world-writable")


def answers(path: str) -> bool:
    """Whether something accepts connections on the unix socket ``path`` right now."""
    probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    probe.settimeout(PROBE_TIMEOUT)
    try:
        probe.connect(path)
        return True
    except OSError:
        return False
    finally:
        probe.close()


def listen_unix(path: str, backlog: int = 256) -> socket.socket:
    """A listening socket at ``path``, mode 0600, bound under a temporary name and renamed into place.

    A stale socket file from a previous run is replaced; a live one (another agent answering) is a
    SystemExit, never silently stolen.
    """
    ensure_private_dir(os.path.dirname(os.path.abspath(path)))
    if os.path.exists(path) and answers(path):
        raise SystemExit(f"cnichain-agent: another agent is serving on {path}")
    tmp = f"{path}.{os.getpid()}.tmp"
    try:
        os.unlink(tmp)
    except FileNotFoundError:
        pass
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    old = os.umask(0o177)
    try:
        sock.bind(tmp)
    finally:
        os.umask(old)
    os.chmod(tmp, 0o600)
    sock.listen(backlog)
    os.replace(tmp, path)
    return sock


def listen_loopback(port: int, backlog: int = 16) -> socket.socket:
    """A TCP listener on 127.0.0.1:``port`` (the opt-in Prometheus endpoint)."""
    tcp = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    tcp.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    tcp.bind(("127.0.0.1", port))
    tcp.listen(backlog)
    return tcp


def unlink_if_ours(path: str, inode: int) -> None:
    """Remove ``path`` only if it is still the socket we bound (a new agent may have replaced it)."""
    try:
        if os.stat(path).st_ino == inode:
            os.unlink(path)
    except OSError:
        pass


def send_quietly(sock: socket.socket, data: bytes) -> None:
    """Write a message, blocking at most briefly; a peer that is gone or stuck is not waited for."""
    try:
        sock.setblocking(True)
        sock.settimeout(SEND_TIMEOUT)
        sock.sendall(data)
    except OSError:
        pass


def send_and_close(sock: socket.socket, data: bytes) -> None:
    """A last message on a connection the agent is done with."""
    send_quietly(sock, data)
    sock.close()
