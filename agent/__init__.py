"""The node agent: plugin handlers kept warm in long-lived workers, each request from a verified clean state.

A cold plugin exec pays for interpreter start-up and the pyroute2 import (150-200 ms).  The agent
pays once: at start it imports every plugin and what they use, then serves requests from the
installed shims (:mod:`cnichain.common.shim`) on a root-only unix socket.  Each request runs the
same :func:`cnichain.common.skel.dispatch` the cold path runs, in a worker process that serves one
request after another (``pool``), returning to its own namespaces and verified state in between
(``home``) and replaced whenever it cannot prove that state, or a request crashed or hung in it:

* the worker enters the caller's network and mount namespaces (opened from the peer's pid the
  moment the connection is accepted, then checked against the namespace the shim says it is in),
  so a caller whose "node" is a namespace of its own sees exactly what a cold exec would do;
* the worker gets the request's environment, umask and a private stdout/stderr; nothing it does
  reaches the agent, and a crash or hang only fails that request (it is killed after a limit);
* the worker writes the answer to the shim itself, so the answer survives the agent being killed
  or restarted mid-request (see the shim's docstring for the handshake and retry semantics).

Counters and latency histograms per plugin and command are served in Prometheus text format over
HTTP on a second root-only unix socket (``<socket>.metrics``) and, opt-in, on a loopback TCP port.

The modules, one job each (pure ones marked):

``protocol``   (pure) frames out of a buffer, REQUEST validation, the agent's own reply frames
``metrics``    (pure) counters, histograms, the Prometheus text and its HTTP response
``config``     settings, limits and the command line (the one declaration of the agent's options)
``budget``     the memory limit and CPUs of the agent's cgroup, and how many workers fit in them
``peer``       caller credentials, its namespaces, and entering them
``sockets``    listening sockets set up safely; send-and-forget writes
``activation`` listening sockets passed by systemd (socket activation, sd_listen_fds semantics)
``warmup``     importing every plugin and heavy library before the first fork
``worker``     one request: isolate, dispatch, answer; what a worker's status means
``pool``       long-lived workers: fork, warm, take requests (SCM_RIGHTS), report DONE or retire
``home``       a worker's home state: captured once, returned to and verified after each request
``delegates``  IPAM delegates sent to the agent (STATUS: run in place) instead of exec'd back to us
``log``        the request log
``connection`` one accepted connection and its states: read -> go -> run, each with its deadline
``events``     the tags of the selector's keys, named once
``handshake``  admission at accept, then REQUEST/ACK/GO; VERSION, metrics and refusals answered
``inflight``   a request's worker from GO to its DONE or death: queue, start, finish, answer for it, kill
``pool_keeper`` the agent's workers: take (or fork at once), "ready"/DONE/exits, sizing, close
``server``     the event loop: register, dispatch, signals, drain, the deadline sweep
``control``    start/stop an agent process, fetch its metrics, ``status`` (tests, bench, operators)

This package must stay importable without typer: ``cnichain agent`` (cli/app.py) hands its
arguments to :func:`main`, whose command line :mod:`config` declares, and benchmarks use
:func:`running_agent`.
"""

from __future__ import annotations

from cnichain.agent.config import GO_TIMEOUT, KILL_GRACE, READ_TIMEOUT, AgentConfig, parse_args
from cnichain.agent.control import RunningAgent, agent_command, fetch_metrics, running_agent
from cnichain.agent.delegates import DelegateRunner, launcher_target
from cnichain.agent.metrics import BUCKETS, Histogram, Metrics
from cnichain.agent.peer import CLONE_NEWNET, CLONE_NEWNS, setns
from cnichain.agent.protocol import (MAX_ENV_ENTRIES, MAX_REQUEST, MAX_TYPE_LEN, AgentRequest, Refusal,
                                         RequestError, decode_request, error_result)
from cnichain.agent.server import Agent, main, serve
from cnichain.agent.warmup import load_plugins, preload
from cnichain.agent.worker import EXIT_CNI_ERROR, EXIT_FAILED, EXIT_OK, EXIT_UNDELIVERED

__all__ = [
    "Agent", "AgentConfig", "AgentRequest", "BUCKETS", "CLONE_NEWNET", "CLONE_NEWNS", "DelegateRunner",
    "EXIT_CNI_ERROR", "EXIT_FAILED", "EXIT_OK", "EXIT_UNDELIVERED", "GO_TIMEOUT", "Histogram", "KILL_GRACE",
    "MAX_ENV_ENTRIES", "MAX_REQUEST", "MAX_TYPE_LEN", "Metrics", "READ_TIMEOUT", "Refusal", "RequestError",
    "RunningAgent", "agent_command", "decode_request", "error_result", "fetch_metrics", "launcher_target",
    "load_plugins", "main", "parse_args", "preload", "running_agent", "serve", "setns",
]
