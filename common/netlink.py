"""Netlink sessions for the plugins: plain rtnetlink (common.rtnl) first, pyroute2 when needed.

``import pyroute2`` costs ~90 ms, more than everything else in a plugin exec together, and each of
its requests ~0.3 ms of Python; the requests the plugins make most (one link, bandwidth's tc
changes, tuning's link attributes, bridge's common path) are built by common.rtnl instead, on a
:func:`route_socket`.  pyroute2 is imported on first use only: :func:`iproute` (which carries a
plain socket too, for :func:`get_link`) and :class:`LazySession` (a plain socket that opens an
``IPRoute`` the first time something else is asked of it).  Sockets are opened with the calling
thread inside the target namespace and keep that namespace afterwards; no fork, unlike
``IPRoute(netns=...)``.
"""

from __future__ import annotations

import errno
from contextlib import contextmanager

from . import kerneltime, netns
from .kernel_errors import errno_of

TYPE_CHECKING = False
if TYPE_CHECKING:  # annotations only: typing costs milliseconds on paths that never load pyroute2
    from typing import Any, Iterator, Optional

    from .rtnl import Link, RouteSocket

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
    ignores the flag.  After :data:`DUMP_ATTEMPTS` tries the last listing is used, as there.
    Its ``close`` also closes the lookup socket :func:`iproute` adds."""

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

    def close(self: Any, *args: Any, **kwargs: Any) -> Any:
        sock = self.__dict__.pop("rtnl", None)
        if sock is not None:
            sock.close()
        return base.close(self, *args, **kwargs)

    methods: dict[str, Any] = {name: retrying(name) for name in DUMPS}
    methods["close"] = close
    return type("IPRoute", (base,), methods)


def iproute(netns_path: Optional[str] = None) -> Any:
    """An ``IPRoute`` bound to ``netns_path`` (or to the caller's namespace), with the plain
    rtnetlink socket of :func:`get_link` next to it (``rtnl``, closed with it)."""
    IPRoute = _iproute_class()

    if not netns_path:
        return _with_route_socket(IPRoute())
    with netns.entered(netns_path):
        return _with_route_socket(IPRoute())


def _with_route_socket(ipr: Any) -> Any:
    from .rtnl import RouteSocket

    try:
        ipr.rtnl = RouteSocket()  # made here: bound to the same namespace
    except BaseException:
        ipr.close()
        raise
    if kerneltime.spans is not None:
        _time_sends(ipr)
    return ipr


def _time_sends(ipr: Any) -> None:
    """Record each request pyroute2 sends on ``ipr`` (benchmarks only: :mod:`.kerneltime`).

    pyroute2 0.9 sends on the plain socket object its ``asyncore`` holds; a release laid out
    otherwise simply goes untimed (the benchmark reports no netlink spans), never fails.
    """
    sock = getattr(getattr(ipr, "asyncore", None), "socket", None)
    if sock is not None and hasattr(sock, "__dict__"):
        sock.send = kerneltime.timed("netlink", sock.send)


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


def get_link(handle: Any, *, name: str = "", index: int = 0) -> Optional[Link]:
    """The link ``name`` (or ``index``) of ``handle``'s namespace, None when there is none.

    ``handle`` is an :func:`iproute` or a :func:`route_socket`: the lookup is one RTM_GETLINK on
    the plain rtnetlink socket both carry (:mod:`.rtnl`), ~20 µs of Python against ~300 through
    pyroute2, and no listing.
    """
    try:
        return handle.rtnl.get_link(name, index)
    except OSError as exc:
        if is_gone(exc):
            return None
        raise


def get_link_in(netns_path: str, *, name: str = "", index: int = 0) -> Optional[Link]:
    """:func:`get_link` in the namespace at ``netns_path``, for a caller that needs nothing else
    there: one socket and one request, no pyroute2 (``netns.NetnsGone`` when the path is gone)."""
    with route_socket(netns_path) as sock:
        return get_link(sock, name=name, index=index)


def route_socket(netns_path: Optional[str] = None) -> RouteSocket:
    """A plain rtnetlink socket (:class:`.rtnl.RouteSocket`) of ``netns_path`` (or of the
    caller's namespace): what a plugin whose requests :mod:`.rtnl` can build uses instead of an
    ``IPRoute``, so it never loads pyroute2."""
    from .rtnl import RouteSocket

    if not netns_path:
        return RouteSocket()
    with netns.entered(netns_path):
        return RouteSocket()


class LazySession:
    """A plain rtnetlink socket (``rtnl``) for the requests :mod:`.rtnl` builds, with an
    ``IPRoute`` of the same namespace opened -- and pyroute2 imported -- only when a caller uses
    anything else: every other attribute is the ``IPRoute``'s.  So a plugin whose common path needs
    only the plain socket never loads pyroute2 (~0.1 s of a cold exec), and its rarer paths keep
    pyroute2's requests unchanged.

    The namespace is held open (an fd) until :meth:`close`, so the late ``IPRoute`` is made in the
    very namespace the socket was, wherever the calling thread is by then.
    """

    def __init__(self, netns_path: Optional[str] = None) -> None:
        import os

        with netns.entered(netns_path) if netns_path else _here():
            self._ns_fd = os.open("/proc/thread-self/ns/net", os.O_RDONLY | os.O_CLOEXEC)
            try:
                self.rtnl = route_socket()
            except BaseException:
                os.close(self._ns_fd)
                raise
        self._ipr: Any = None

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_"):
            raise AttributeError(name)
        if self._ipr is None:
            with netns.entered(f"/proc/self/fd/{self._ns_fd}"):
                self._ipr = _iproute_class()()
            if kerneltime.spans is not None:
                _time_sends(self._ipr)
        return getattr(self._ipr, name)

    def close(self) -> None:
        import os

        if self._ipr is not None:
            self._ipr.close()
            self._ipr = None
        self.rtnl.close()
        os.close(self._ns_fd)

    def __enter__(self) -> LazySession:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()


class _here:
    """A no-op ``with``: the namespace the thread is already in."""

    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc_info: object) -> None:
        return None


def link_of(msg: Any) -> Link:
    """The :class:`~.rtnl.Link` of a pyroute2 link message (an entry of ``get_links()``)."""
    from .rtnl import Link

    return Link(
        index=int(msg["index"]),
        name=str(msg.get_attr("IFLA_IFNAME") or ""),
        flags=int(msg["flags"]),
        mtu=int(msg.get_attr("IFLA_MTU") or 0),
        mac=str(msg.get_attr("IFLA_ADDRESS") or ""),
        kind=str(msg.get_nested("IFLA_LINKINFO", "IFLA_INFO_KIND") or ""),
        alias=str(msg.get_attr("IFLA_IFALIAS") or ""),
        operstate=str(msg.get_attr("IFLA_OPERSTATE") or "UNKNOWN"),
        peer=int(msg.get_attr("IFLA_LINK") or 0),
        master=int(msg.get_attr("IFLA_MASTER") or 0),
        txqlen=int(msg.get_attr("IFLA_TXQLEN") or 0),
    )


def link_index(ipr: Any, name: str) -> Optional[int]:
    """The index of the link named ``name``, None when there is none (:func:`get_link`)."""
    link = get_link(ipr, name=name)
    return link.index if link is not None else None
