"""Opt-in accounting of the time a request spends in the kernel, for benchmarks/warm_floor.py.

A plugin's warm request is its Python plus the kernel work it asks for; to tell the two apart, the
benchmark switches this on around one request and reads back the spans the hooks recorded:

* ``netlink``: each rtnetlink request's ``send`` (the kernel does a request's work inside that
  system call and queues the answer) -- pyroute2's socket and our own link-lookup socket;
* ``nftables``: each libnftables command (its C code and the kernel round trips: JSON parsing,
  cache fetch, the transaction);
* ``sysctl``: each read or write of a ``/proc/sys`` file.

Off, which is always outside a benchmark, nothing is wrapped and each hook is one test of a
module global that is None.
"""

from __future__ import annotations

import time

TYPE_CHECKING = False
if TYPE_CHECKING:  # annotations only
    from typing import Any, Callable, Optional

spans: Optional[list[tuple[str, float]]] = None  # (kind, seconds) while on


def start() -> None:
    """Record from now on (a list of its own for each start)."""
    global spans
    spans = []


def stop() -> list[tuple[str, float]]:
    """Stop recording; the spans recorded since :func:`start`."""
    global spans
    out, spans = spans or [], None
    return out


def record(kind: str, seconds: float) -> None:
    if spans is not None:
        spans.append((kind, seconds))


def timed(kind: str, call: Callable[..., Any]) -> Callable[..., Any]:
    """``call`` with its duration recorded as ``kind`` (while recording is on)."""

    def wrapper(*args: Any, **kwargs: Any) -> Any:
        started = time.perf_counter()
        try:
            return call(*args, **kwargs)
        finally:
            record(kind, time.perf_counter() - started)

    return wrapper
