"""The agent's settings: one dataclass, its defaults and limits, and the command line that fills it.

:func:`parser` is the only declaration of the agent's options (the reconciler's come from
:func:`cnichain.agent.reconcile.settings.add_arguments`): ``python -m cnichain.agent`` (what
:func:`cnichain.agent.control.agent_command` starts) and ``cnichain agent``, which hands its
arguments over untouched, both parse argv with it into an :class:`AgentConfig`.
"""

from __future__ import annotations

import argparse
import os
from dataclasses import dataclass, field
from typing import Optional

from cnichain.agent.protocol import MAX_REQUEST
from cnichain.agent.reconcile.settings import ReconcileConfig, add_arguments, from_args
from cnichain.common import shim

READ_TIMEOUT = 5.0  # from accept to a complete request
GO_TIMEOUT = 5.0  # from ACK to the shim's GO
KILL_GRACE = 2.0  # after the per-request limit (the worker's own alarm) before SIGKILL


@dataclass
class AgentConfig:
    socket_path: str = shim.DEFAULT_SOCKET
    metrics_socket: Optional[str] = None  # default "<socket_path>.metrics"; "" disables
    metrics_port: int = 0  # opt-in loopback TCP port for Prometheus
    request_timeout: float = 60.0
    max_request: int = MAX_REQUEST
    max_workers: int = 64  # an upper bound; the memory budget and the CPUs usually set a lower one
    pool_size: int = 2  # long-lived workers kept ready at least (more after bursts, see pool_keeper):
    # a pod's chain runs its plugins one after another, plus bridge's IPAM delegate while bridge waits
    queue_size: int = 256  # requests told GO that wait for a worker once the pool is at its capacity
    queue_wait: float = 6.0  # seconds one waits at most; then its shim runs it cold (nothing ran yet)
    memory_budget: int = 512 << 20  # bytes planned within when the container sets no memory limit
    worker_requests: int = 1000  # a worker retires after serving this many (1: a fresh process each)
    worker_rss_growth: int = 64 << 20  # ... or when its resident memory grew this much (bytes; 0: never)
    drain_timeout: Optional[float] = None  # default: request_timeout + KILL_GRACE
    log_file: Optional[str] = None  # default: stderr
    extra_plugins: dict[str, str] = field(default_factory=dict)  # type -> module exposing PLUGIN
    delegates_in_place: bool = True  # run delegates that would come back to us in the delegating worker, not an exec
    reconcile: ReconcileConfig = field(default_factory=ReconcileConfig)  # see agent/reconcile/

    @property
    def metrics_path(self) -> str:
        """The metrics socket path ("" when disabled)."""
        return self.socket_path + ".metrics" if self.metrics_socket is None else self.metrics_socket

    @property
    def drain_limit(self) -> float:
        """How long a drain waits for running workers before the agent leaves anyway."""
        return self.drain_timeout if self.drain_timeout is not None else self.request_timeout + KILL_GRACE


STATUS_USAGE = "cnichain agent status [--socket PATH] [--json]: the reconciler's view of a running agent"


def parser() -> argparse.ArgumentParser:
    """The agent's command line (``--help`` of ``cnichain agent`` is this parser's)."""
    p = argparse.ArgumentParser(
        prog="cnichain agent", epilog=STATUS_USAGE,
        description="Run the node agent in the foreground: warm plugin handlers behind the installed shims, "
                    "plus the node's reconciler.")
    p.add_argument("--socket", default=os.environ.get(shim.ENV_SOCKET) or shim.DEFAULT_SOCKET, metavar="PATH",
                   help=f"unix socket the plugin shims connect to (default ${shim.ENV_SOCKET}, else %(default)s)")
    p.add_argument("--metrics-socket", default=None, metavar="PATH",
                   help='Prometheus endpoint (HTTP on a unix socket); default "<socket>.metrics", "" disables')
    p.add_argument("--metrics-port", type=int, default=0, metavar="PORT",
                   help="also serve /metrics on 127.0.0.1:PORT (opt-in)")
    p.add_argument("--request-timeout", type=float, default=AgentConfig.request_timeout, metavar="SECONDS",
                   help="seconds before a request's worker is killed")
    p.add_argument("--max-workers", type=int, default=AgentConfig.max_workers, metavar="N",
                   help="workers at once at most; the memory budget and usable CPUs may set fewer "
                        "(the capacity is logged at start); more requests wait in the queue")
    p.add_argument("--queue", type=int, default=AgentConfig.queue_size, metavar="N",
                   help="requests that may wait for a warm worker once all are busy; beyond that they run cold")
    p.add_argument("--queue-wait", type=float, default=AgentConfig.queue_wait, metavar="SECONDS",
                   help="how long a request waits in the queue at most before its shim runs it cold")
    p.add_argument("--memory-budget", type=int, default=AgentConfig.memory_budget >> 20, metavar="MiB",
                   help="memory the pool is sized to when the agent's cgroup sets no limit "
                        "(with one: cgroup v2 memory.max or v1 memory.limit_in_bytes)")
    p.add_argument("--pool", type=int, default=AgentConfig.pool_size, metavar="N",
                   help="long-lived workers kept ready at least; more stay after a burst (0: none ahead of demand)")
    p.add_argument("--worker-requests", type=int, default=AgentConfig.worker_requests, metavar="N",
                   help="a worker retires after N requests (1: a fresh process for every request)")
    p.add_argument("--worker-rss-growth", type=int, default=AgentConfig.worker_rss_growth >> 20, metavar="MiB",
                   help="a worker retires when its resident memory grew by more than this (0: never)")
    p.add_argument("--drain-timeout", type=float, default=None, metavar="SECONDS",
                   help="how long a drain waits for running workers (default: request timeout + grace)")
    p.add_argument("--log-file", default=None, metavar="PATH", help="request log (default: stderr)")
    p.add_argument("--exec-delegates", action="store_true",
                   help="exec IPAM delegates even when they are our own launchers (default: run them in the delegating worker)")
    p.add_argument("--plugin", action="append", default=[], metavar="TYPE=MODULE",
                   help="also serve a plugin from a module exposing PLUGIN (repeatable)")
    add_arguments(p)
    return p


def parse_args(argv: Optional[list[str]] = None) -> AgentConfig:
    """An :class:`AgentConfig` from ``argv``; a wrong value exits 2 with the usage line."""
    p = parser()
    ns = p.parse_args(argv)
    extra = {}
    for item in ns.plugin:
        name, sep, module = item.partition("=")
        if not sep or not name or not module:
            p.error(f"--plugin {item!r}: expected TYPE=MODULE")
        extra[name] = module
    return AgentConfig(
        socket_path=ns.socket,
        metrics_socket=ns.metrics_socket,
        metrics_port=ns.metrics_port,
        request_timeout=ns.request_timeout,
        max_workers=max(1, ns.max_workers),
        pool_size=max(0, ns.pool),
        queue_size=max(0, ns.queue),
        queue_wait=max(0.0, ns.queue_wait),
        memory_budget=max(1, ns.memory_budget) << 20,
        worker_requests=max(1, ns.worker_requests),
        worker_rss_growth=max(0, ns.worker_rss_growth) << 20,
        drain_timeout=ns.drain_timeout,
        log_file=ns.log_file,
        extra_plugins=extra,
        delegates_in_place=not ns.exec_delegates,
        reconcile=_reconcile(p, ns),
    )


def _reconcile(p: argparse.ArgumentParser, ns: argparse.Namespace) -> ReconcileConfig:
    cfg = from_args(ns)
    try:
        cfg.validate()
    except ValueError as exc:
        p.error(str(exc))
    return cfg
