"""What the agent's selector keys carry: a tag naming the kind of object, and the object.

The event loop registers several kinds of descriptor on one epoll selector -- the signal wakeup
socket, listeners, client connections, one-shot workers' pidfds, and the long-lived workers (their
channel and their pidfd) -- and dispatches a ready key on its tag.  The tags live here, named once,
because the loop and the pool keeper both register keys; :func:`unregister` is the one way either
forgets one (the object may already be gone from the selector, which is not an error), and
:func:`read_ready` the one way either reads a descriptor the selector reported readable.
"""

from __future__ import annotations

import selectors
import socket
from typing import Optional, Union

WAKE = "wake"  # the signal wakeup socket; data: (WAKE, None)
LISTEN = "listen"  # a listening socket; data: (LISTEN, listener kind)
CONN = "conn"  # an accepted connection; data: (CONN, Conn)
CHILD = "child"  # a running request's worker pidfd; data: (CHILD, Conn)
WORKER_CHAN = "worker-chan"  # a long-lived worker's channel ("ready", DONE, or its end); data: (WORKER_CHAN, Worker)
WORKER_EXIT = "worker-exit"  # a long-lived worker's pidfd (it exited); data: (WORKER_EXIT, Worker)


def unregister(sel: selectors.BaseSelector, fileobj: Union[int, socket.socket]) -> None:
    """Forget ``fileobj`` if it is registered; quietly do nothing if it is not (or is closed)."""
    try:
        sel.unregister(fileobj)
    except (KeyError, ValueError):
        pass


def read_ready(sock: socket.socket, size: int) -> Optional[bytes]:
    """What a readable non-blocking socket holds: None for a spurious wakeup (nothing yet), ``b""``
    for end-of-stream or a broken connection (the loop and the pool keeper treat both as the peer
    leaving), else up to ``size`` bytes."""
    try:
        return sock.recv(size)
    except (BlockingIOError, InterruptedError):
        return None
    except OSError:
        return b""
