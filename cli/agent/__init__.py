"""The node agent: plugin handlers kept warm, one forked worker per request.

A cold plugin exec pays for interpreter start-up and the pyroute2 import (150-200 ms).  The agent
pays once: at start it imports every plugin and what they use, then serves requests from the
installed shims (:mod:`cnichain.common.shim`) on a root-only unix socket.  Each request runs the
same :func:`cnichain.common.skel.dispatch` the cold path runs, in a child forked for it (ahead of
demand when the pool has one ready, see ``pool``):

* the child enters the caller's network and mount namespaces (opened from the peer's pid the
  moment the connection is accepted, then checked against the namespace the shim says it is in),
  so a caller whose "node" is a namespace of its own sees exactly what a cold exec would do;
* the child gets the request's environment, umask and a private stdout/stderr; nothing it does
  reaches the agent, and a crash or hang only fails that request (it is killed after a limit);
* the child writes the answer to the shim itself, so the answer survives the agent being killed
  or restarted mid-request (see the shim's docstring for the handshake and retry semantics).

Counters and latency histograms per plugin and command are served in Prometheus text format over
HTTP on a second root-only unix socket (``<socket>.metrics``) and, opt-in, on a loopback TCP port.

The modules, one job each (pure ones marked):

``protocol``   (pure) frames out of a buffer, REQUEST validation, the agent's own reply frames
``metrics``    (pure) counters, histograms, the Prometheus text and its HTTP response
``config``     settings, limits and the argparse command line
``peer``       caller credentials, its namespaces, and entering them
``sockets``    listening sockets set up safely; send-and-forget writes
``warmup``     importing every plugin and heavy library before the first fork
``worker``     the forked child: isolate, dispatch, answer; what its exit status means
``pool``       workers forked and warmed ahead of demand, handed one request each (SCM_RIGHTS)
``delegates``  IPAM delegates forked inside a worker instead of exec'd back to us
``log``        the request log
``connection`` one accepted connection and its states: read -> go -> run, each with its deadline
``events``     the tags of the selector's keys, named once
``handshake``  admission at accept, then REQUEST/ACK/GO; VERSION, metrics and refusals answered
``inflight``   a request's worker from GO to reaping: start (pooled or forked), reap, kill
``pool_keeper`` the agent's idle pooled workers: refill, "ready", early exits, take one, close
``server``     the event loop: register, dispatch, signals, drain, the deadline sweep
``control``    start/stop an agent process, fetch its metrics (tests, bench, operators)

This package must stay importable without typer: ``cnichain agent`` (cli/app.py) is a thin wrapper
over :func:`serve`, and benchmarks use :func:`running_agent`.
"""

from __future__ import annotations

from cnichain.cli.agent.config import GO_TIMEOUT, KILL_GRACE, READ_TIMEOUT, AgentConfig, parse_args
from cnichain.cli.agent.control import RunningAgent, agent_command, fetch_metrics, running_agent
from cnichain.cli.agent.delegates import DelegateRunner, launcher_target
from cnichain.cli.agent.metrics import BUCKETS, Histogram, Metrics
from cnichain.cli.agent.peer import CLONE_NEWNET, CLONE_NEWNS, setns
from cnichain.cli.agent.protocol import (MAX_ENV_ENTRIES, MAX_REQUEST, MAX_TYPE_LEN, AgentRequest, Refusal,
                                         RequestError, decode_request, error_result)
from cnichain.cli.agent.server import Agent, main, serve
from cnichain.cli.agent.warmup import load_plugins, preload
from cnichain.cli.agent.worker import EXIT_CNI_ERROR, EXIT_FAILED, EXIT_OK, EXIT_UNDELIVERED

__all__ = [
    "Agent", "AgentConfig", "AgentRequest", "BUCKETS", "CLONE_NEWNET", "CLONE_NEWNS", "DelegateRunner",
    "EXIT_CNI_ERROR", "EXIT_FAILED", "EXIT_OK", "EXIT_UNDELIVERED", "GO_TIMEOUT", "Histogram", "KILL_GRACE",
    "MAX_ENV_ENTRIES", "MAX_REQUEST", "MAX_TYPE_LEN", "Metrics", "READ_TIMEOUT", "Refusal", "RequestError",
    "RunningAgent", "agent_command", "decode_request", "error_result", "fetch_metrics", "launcher_target",
    "load_plugins", "main", "parse_args", "preload", "running_agent", "serve", "setns",
]
