"""pyroute2 access, imported only by the code paths that need netlink.

``import pyroute2`` costs ~90 ms, more than everything else in a plugin exec together, so it is
imported here on first use, never at module import time.  Sockets are opened with the calling
thread inside the target namespace and keep that namespace afterwards; no fork, unlike
``IPRoute(netns=...)``.
"""

from __future__ import annotations

import errno
from contextlib import contextmanager
from typing import Any, Iterator, Optional

from . import netns

# Errors that mean "already gone" for idempotent DEL.
GONE = {errno.ENOENT, errno.ENODEV, errno.ESRCH, errno.EADDRNOTAVAIL, errno.ENXIO}


def _iproute_class() -> Any:
    """``pyroute2.IPRoute`` without paying for ``pyroute2/__init__``.

    The package ``__init__`` imports every pyroute2 feature (NDB, IPDB, conntrack, nl80211, ...):
    ~90 ms of a ~125 ms plugin exec.  When nothing has imported pyroute2 yet, a bare package module
    is registered so only ``pyroute2.iproute.linux`` and what it needs load (~50 ms).  The bare module
    runs the real ``__init__`` on the first attribute it lacks, so ``from pyroute2 import X``
    elsewhere in the same process keeps working.
    """
    import sys

    if "pyroute2" not in sys.modules:
        import importlib
        import importlib.util
        import types

        spec = importlib.util.find_spec("pyroute2")
        if spec is not None and spec.loader is not None and spec.submodule_search_locations:
            bare = types.ModuleType("pyroute2")
            bare.__spec__, bare.__loader__, bare.__file__ = spec, spec.loader, spec.origin
            bare.__path__, bare.__package__ = list(spec.submodule_search_locations), "pyroute2"

            def complete(name: str) -> Any:
                if name.startswith("__"):
                    raise AttributeError(name)
                if importlib.util.find_spec(f"pyroute2.{name}") is not None:  # a submodule: just it
                    return importlib.import_module(f"pyroute2.{name}")
                del bare.__getattr__  # type: ignore[attr-defined]
                spec.loader.exec_module(bare)  # type: ignore[union-attr]
                return getattr(bare, name)

            bare.__getattr__ = complete  # type: ignore[attr-defined]
            sys.modules["pyroute2"] = bare
    from pyroute2.iproute.linux import IPRoute

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
    code = getattr(exc, "code", None)
    return code if isinstance(code, int) else None


def is_gone(exc: BaseException) -> bool:
    return netlink_errno(exc) in GONE


def link_index(ipr: Any, name: str) -> Optional[int]:
    found = ipr.link_lookup(ifname=name)
    return found[0] if found else None
