"""Starting, querying and stopping an agent from the outside: what tests, the bench and operators use.

:func:`running_agent` starts an agent process with this installation's interpreter
and import roots, waits until *its* socket answers (a new inode at the path, not a stale file or a
previous agent), and drains it on exit.  :func:`fetch_metrics` is ``curl --unix-socket`` in Python;
:func:`status_main` is ``cnichain agent status``, the reconciler's view of a running agent.
"""

from __future__ import annotations

import os
import socket
import sys
import time
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Iterator, Optional

from cnichain.agent.metrics import parse_http_response
from cnichain.agent.sockets import answers


@dataclass
class RunningAgent:
    proc: Any
    socket_path: str
    metrics_socket: str
    log_path: str

    @property
    def pid(self) -> int:
        return int(self.proc.pid)

    def metrics(self) -> str:
        return fetch_metrics(self.metrics_socket)

    def stop(self, timeout: float = 30.0) -> int:
        """SIGTERM (drain) and wait; SIGKILL if it does not leave in time."""
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout)
            except Exception:  # noqa: BLE001 - subprocess.TimeoutExpired
                self.proc.kill()
                self.proc.wait(5)
        return int(self.proc.returncode)

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(5)


def agent_command(socket_path: str, *args: str) -> list[str]:
    """argv that starts an agent with this installation's interpreter and import roots."""
    from cnichain.node.launchers import import_roots

    roots = import_roots()
    code = (f"import sys; sys.path[0:0] = {roots!r}; "
            "from cnichain.agent import main; sys.exit(main(sys.argv[1:]))")
    return [sys.executable, "-P", "-c", code, "--socket", socket_path, *args]


@contextmanager
def running_agent(
    socket_path: str,
    netns: Optional[str] = None,
    args: tuple[str, ...] = (),
    env: Optional[dict] = None,
    start_timeout: float = 30.0,
    preexec: Any = None,
) -> Iterator[RunningAgent]:
    """Start ``cnichain agent --socket PATH`` as a subprocess, wait until it serves, stop it after.

    ``netns`` only places the agent itself; every request runs in its caller's namespace anyway.
    ``env`` adds variables (e.g. PYTHONPATH for test-only plugin modules given with ``--plugin``).
    ``preexec`` runs in the child before the exec (e.g. joining a memory cgroup, tools/memcg.py).
    """
    import subprocess

    from cnichain.common import netns as netns_mod

    log_path = socket_path + ".log"
    before = _inode(socket_path)  # ready means: a new socket (ours) at the path, answering
    child_env = dict(os.environ)
    child_env.update(env or {})
    os.makedirs(os.path.dirname(os.path.abspath(socket_path)), mode=0o700, exist_ok=True)
    log_fd = os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_CLOEXEC, 0o600)
    argv = agent_command(socket_path, *args)
    try:
        if netns:
            with netns_mod.entered(netns):
                proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=log_fd, stderr=log_fd, env=child_env,
                                        preexec_fn=preexec)
        else:
            proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=log_fd, stderr=log_fd, env=child_env,
                                    preexec_fn=preexec)
    finally:
        os.close(log_fd)
    metrics_socket = socket_path + ".metrics"
    for a, b in zip(args, args[1:]):
        if a == "--metrics-socket":
            metrics_socket = b
    agent = RunningAgent(proc, socket_path, metrics_socket, log_path)
    try:
        deadline = time.monotonic() + start_timeout
        while not (_inode(socket_path) not in (0, before) and answers(socket_path)):
            if proc.poll() is not None:
                with open(log_path, errors="replace") as fh:
                    raise RuntimeError(f"agent exited with {proc.returncode}: {fh.read()[-2000:]}")
            if time.monotonic() > deadline:
                raise RuntimeError(f"agent did not start serving on {socket_path} within {start_timeout}s")
            time.sleep(0.02)
        yield agent
    finally:
        agent.stop()


def _inode(path: str) -> int:
    try:
        return os.stat(path).st_ino
    except OSError:
        return 0


def fetch_metrics(path: str, timeout: float = 5.0) -> str:
    """GET /metrics from the agent's metrics socket (what ``curl --unix-socket`` would do)."""
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.settimeout(timeout)
    try:
        sock.connect(path)
        sock.sendall(b"GET /metrics HTTP/1.1\r\nHost: agent\r\n\r\n")
        chunks = []
        while True:
            data = sock.recv(65536)
            if not data:
                break
            chunks.append(data)
    finally:
        sock.close()
    return parse_http_response(b"".join(chunks))


def status_main(argv: Optional[list[str]] = None) -> int:
    """``cnichain agent status``: print the reconciler's view; 1 when there is none."""
    import argparse
    import json

    from cnichain.agent.reconcile import status as rstatus
    from cnichain.agent.reconcile.settings import status_path
    from cnichain.common import shim

    p = argparse.ArgumentParser(prog="cnichain agent status", description="The reconciler's view: mode, last sweep, "
                                "counters, each attachment's state, leaks and stale cache entries.")
    p.add_argument("--socket", default=os.environ.get(shim.ENV_SOCKET) or shim.DEFAULT_SOCKET, metavar="PATH",
                   help="the agent's socket")
    p.add_argument("--json", action="store_true", help="the reconciler's whole view as JSON")
    ns = p.parse_args(argv)
    path = status_path(ns.socket)
    doc = rstatus.read(path)
    if doc is None:
        print(f"error: no reconciler status at {path} (agent not running, or --reconcile off)", file=sys.stderr)
        return 1
    print(json.dumps(doc, indent=2, sort_keys=True) if ns.json else rstatus.render_text(doc))
    return 0
