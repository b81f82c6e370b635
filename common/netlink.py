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
    global _IPROUTE
    if _IPROUTE is None:
        from pyroute2 import IPRoute

        _IPROUTE = _retrying_dumps(IPRoute)
    return _IPROUTE


_IPROUTE: Any = None
NLM_F_DUMP_INTR = 0x10
DUMP_ATTEMPTS = 5  # the reference's netlinksafe.maxAttempts
DUMPS = ("get_links", "get_addr", "get_routes", "get_qdiscs", "get_filters", "get_neighbours")


def interrupted(messages: Any) -> bool:
    """The kernel flagged the dump as interrupted: a change raced it, so it may be inconsistent."""
    return any(m["header"]["flags"] & NLM_F_DUMP_INTR for m in messages)


def _retrying_dumps(base: Any) -> Any:
    """``IPRoute`` whose listings are redone when the kernel marks them interrupted
    (``NLM_F_DUMP_INTR``), as the reference's ``netlinksafe`` (1.7.0 on) does: pyroute2 0.9
    ignores the flag.  After :data:`DUMP_ATTEMPTS` tries the last listing is used, as there."""

    def retrying(name: str) -> Any:
        def dump(self: Any, *args: Any, **kwargs: Any) -> Any:
            call = base.__getattr__(self, name)
            for _ in range(DUMP_ATTEMPTS):
                out = tuple(call(*args, **kwargs))
                if not interrupted(out):
                    break
            return out
        dump.__name__ = name
        return dump

    return type("IPRoute", (base,), {name: retrying(name) for name in DUMPS})


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
