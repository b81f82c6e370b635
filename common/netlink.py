"""pyroute2 access, imported only by the code paths that need netlink.

``import pyroute2`` costs ~90 ms, more than everything else in a plugin exec together, so it is
imported here on first use, never at module import time.  Sockets are opened with the calling
thread inside the target namespace and keep that namespace afterwards; no fork, unlike
``IPRoute(netns=...)``.
"""

from __future__ import annotations

import errno
from contextlib import contextmanager

from . import netns
from .kernel_errors import errno_of

TYPE_CHECKING = False
if TYPE_CHECKING:  # annotations only: typing costs milliseconds on paths that never load pyroute2
    from typing import Any, Iterator, Optional

# Errors that mean "already gone" for idempotent DEL.
GONE = {errno.ENOENT, errno.ENODEV, errno.ESRCH, errno.EADDRNOTAVAIL, errno.ENXIO}


def _iproute_class() -> Any:
    """``pyroute2.IPRoute``, imported the supported way on first use.

    The package ``__init__`` loads every pyroute2 feature (~90 ms here).  Skipping it by
    registering a bare package module would save ~30 ms but relies on pyroute2's internals and can
    break on any upgrade; the node agent (warm path) is where that cost goes away instead.
    """
    from pyroute2 import IPRoute

    return IPRoute


def iproute(netns_path: Optional[str] = None) -> Any:
    """An ``IPRoute`` bound to ``netns_path`` (or to the caller's namespace)."""
    IPRoute = _iproute_class()

    if not netns_path:
        return IPRoute()
    with netns.entered(netns_path):
        return IPRoute()


@contextmanager
def session(netns_path: Optional[str] = None) -> Iterator[Any]:
    ipr = iproute(netns_path)
    try:
        yield ipr
    finally:
        ipr.close()


def netlink_errno(exc: BaseException) -> Optional[int]:
    """The errno of a kernel failure (see :func:`.kernel_errors.errno_of`)."""
    return errno_of(exc)


def is_gone(exc: BaseException) -> bool:
    """The object a request named is already gone: what an idempotent DEL treats as done."""
    return errno_of(exc) in GONE


def link_index(ipr: Any, name: str) -> Optional[int]:
    found = ipr.link_lookup(ifname=name)
    return found[0] if found else None
