"""Many pods' chains at once through an agent on a lab node: what the bounded-pool tests share.

A pod is one lab namespace and one attachment of the shipped default chain (bridge with
host-local, portmap with a hostPort pair of its own, bandwidth both ways, tuning,
route-override), with the capability args containerd sends; :func:`all_at_once` runs one
operation for every pod in parallel threads (each exec from its own thread inside the node
namespace, as a runtime's goroutines do) and returns what failed.
"""

from __future__ import annotations

import concurrent.futures
from typing import Callable

from cnichain.podstate.runtime import Attachment, ConfList, Runtime
from tests.integration.test_containerd_del_shapes import CNI_ARGS, chain, conflist, containerd_caps

BASE_PORT = 19000


def default_chain(lab) -> ConfList:
    return conflist(lab, chain("1.1.0"))


def pods(lab, n: int, prefix: str = "s") -> list[Attachment]:
    return [Attachment(f"storm-{prefix}{i}", lab.netns(f"{prefix}{i}"), "eth0", CNI_ARGS,
                       containerd_caps(BASE_PORT + 2 * i)) for i in range(n)]


def all_at_once(runtime: Runtime, atts: list[Attachment], op: Callable[[Attachment], object],
                timeout: float = 600.0) -> dict[str, str]:
    """``op`` for every attachment at once; container id -> error text of those that failed."""
    failed: dict[str, str] = {}
    with concurrent.futures.ThreadPoolExecutor(max_workers=len(atts)) as pool:
        futures = {pool.submit(op, att): att for att in atts}
        for fut in concurrent.futures.as_completed(futures, timeout=timeout):
            exc = fut.exception()
            if exc is not None:
                failed[futures[fut].container_id] = str(exc)
    return failed


def metric(text: str, name: str) -> float:
    """The value of an unlabelled series; a series the agent did not export is an error, never 0
    (a "the queue drained" check would pass on a scrape that lacks the gauge)."""
    for line in text.splitlines():
        if line.startswith(name + " "):
            return float(line.split()[1])
    raise AssertionError(f"no series {name!r} in the agent's metrics")


def series(text: str, prefix: str) -> list[str]:
    return [line for line in text.splitlines() if line.startswith(prefix)]
