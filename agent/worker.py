"""One request: the same dispatch a cold exec runs, isolated like one.

:func:`answer` is what every worker does for a request (dispatch with private streams, write the
RESULT to the shim); a long-lived worker (:mod:`pool`) calls it between entering the request's
state and going home (:mod:`home`).  :func:`run` is the one-shot form, in a child forked for a
request too large for a long-lived worker's channel: it drops the agent's signal handlers and
descriptors, enters the caller's namespaces, takes the request's environment and umask, and
answers.  Either way the worker writes the RESULT frame to the shim itself -- so the answer
survives the agent being killed or restarted mid-request.  Its own alarm bounds any hang; the
agent (:mod:`inflight`) adds a SIGKILL after a grace period in case the alarm is ignored or blocked.

The status tells the agent what happened: :data:`EXIT_OK` and :data:`EXIT_CNI_ERROR` mean the shim
got the answer, :data:`EXIT_UNDELIVERED` that it could not be written, anything else (including
death by a signal) that the agent must answer for the worker.  A one-shot worker exits with it, a
long-lived one reports it in DONE; :func:`outcome_of` and :func:`outcome_of_report` turn either
into that verdict.
"""

from __future__ import annotations

import io
import os
import signal
import socket
import sys
from typing import Any, Optional

from cnichain.agent import peer, protocol

EXIT_OK, EXIT_CNI_ERROR, EXIT_UNDELIVERED, EXIT_FAILED = 0, 1, 2, 3


def arm_alarm(limit: float) -> None:
    """SIGALRM after ``limit`` seconds (at least one), whose default action ends the process."""
    signal.alarm(max(1, int(limit + 0.999)))


def reset_process_state(env: dict) -> None:
    """What a fresh exec would start with: the request's environment, no cached library handles."""
    from cnichain.common import log as log_mod
    from cnichain.common import nft as nft_mod

    # Not os.environ.clear(): MutableMapping.clear pops one key at a time, each pop copying the key
    # list first -- quadratic, ~0.1 ms per request for an agent started from a shell.  Deleting
    # every key and adding the request's in order leaves the same environment, in the same order.
    for key in list(os.environ):
        del os.environ[key]
    os.environ.update(env)
    nft_mod.reset()  # a libnftables context belongs to the namespace it was made in
    log_mod.log.__init__()  # type: ignore[misc]


def dispatch_captured(plugin: Any, env: dict, stdin: bytes) -> tuple[int, bytes]:
    """Run the skeleton's dispatch with private text streams: (exit code, RESULT frame).

    ``sys.stdout``/``sys.stderr`` are replaced too, so a stray print in a plugin lands in the
    answer (as it would in a cold exec's pipes) rather than in the agent's log.
    """
    from cnichain.common.skel import dispatch

    out, err = io.StringIO(), io.StringIO()
    sys.stdout, sys.stderr = out, err
    code = dispatch(plugin, env, stdin, out, err)
    return code, protocol.output_frame(code, out.getvalue(), err.getvalue())


def _keep_only_fds(keep: set[int]) -> None:
    """Close every descriptor but ``keep`` (and 0-2): the agent's listeners and other clients'
    connections must not leak into a plugin, nor be held open by it after the agent exits."""
    low = 3
    for fd in sorted(keep | {0, 1, 2}):
        if fd >= low:
            os.closerange(low, fd)
            low = fd + 1
    os.closerange(low, 1 << 20)


def detach(keep: set[int]) -> None:
    """Leave the agent behind in a forked child: default signal handling, no wakeup fd, no
    descriptors but ``keep`` (and stdout/stderr), stdin from /dev/null."""
    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGALRM, signal.SIGCHLD, signal.SIGPIPE):
        signal.signal(sig, signal.SIG_DFL)
    signal.set_wakeup_fd(-1)
    _keep_only_fds(keep)
    devnull = os.open(os.devnull, os.O_RDONLY)
    os.dup2(devnull, 0)
    os.close(devnull)


def run(conn: socket.socket, req: protocol.AgentRequest, plugin: Any, net_fd: int, mnt_fd: int, limit: float,
        delegates: Optional[Any] = None) -> int:
    """Run one request in a process forked for it and answer the shim; returns the exit status."""
    detach({conn.fileno(), net_fd, mnt_fd})
    arm_alarm(limit)  # default action: terminate; bounds any hang
    peer.enter(net_fd, mnt_fd)
    os.close(net_fd)
    os.close(mnt_fd)
    os.chdir("/")
    os.umask(req.umask)
    reset_process_state(req.env)
    return answer(conn, req, plugin, limit, delegates)


def answer(conn: socket.socket, req: protocol.AgentRequest, plugin: Any, limit: float,
           delegates: Optional[Any] = None) -> int:
    """Dispatch ``req`` (already inside its namespaces and state) and write the RESULT to the shim.

    Returns :data:`EXIT_OK`, :data:`EXIT_CNI_ERROR` or :data:`EXIT_UNDELIVERED`: what a one-shot
    worker exits with, and what a long-lived one reports to the agent (:mod:`pool`).
    """
    from cnichain.common import invoke

    invoke.delegate_runner = delegates
    code, frame = dispatch_captured(plugin, req.env, req.stdin)
    try:
        conn.settimeout(limit)
        conn.sendall(frame)
    except OSError:
        return EXIT_UNDELIVERED
    return EXIT_OK if code == 0 else EXIT_CNI_ERROR


def outcome_of(status: int, killed: bool) -> tuple[int, str, str]:
    """(exit code for the log, outcome label, how it died) from a worker's wait status.

    Outcomes: "ok" and "error" (the shim has the plugin's answer), "undelivered" (the shim was gone),
    "timeout" (the alarm fired, or the server had to kill it), "killed" (a SIGKILL the server did
    not send: the OOM killer, an operator) and "crashed" (anything else; ``how`` says which signal
    or status).  For "timeout" and "crashed" the server answers in the worker's place; for "killed"
    it closes the connection and the shim runs the request cold.
    """
    if os.WIFEXITED(status) and os.WEXITSTATUS(status) in (EXIT_OK, EXIT_CNI_ERROR):
        code = os.WEXITSTATUS(status)
        return code, ("ok" if code == 0 else "error"), ""
    if os.WIFEXITED(status) and os.WEXITSTATUS(status) == EXIT_UNDELIVERED:
        return 1, "undelivered", ""
    if killed or (os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGALRM):
        return 1, "timeout", ""
    if os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGKILL:
        return 1, "killed", f"signal {int(signal.SIGKILL)}"
    how = f"signal {os.WTERMSIG(status)}" if os.WIFSIGNALED(status) else f"status {os.WEXITSTATUS(status)}"
    return 1, "crashed", how


def outcome_of_report(status: int) -> tuple[int, str, str]:
    """:func:`outcome_of` for the status a long-lived worker reports (an ``EXIT_*`` value)."""
    return outcome_of(status << 8, False)  # the wait status of a process that exited with it


def failure_message(req: protocol.AgentRequest, outcome: str, how: str, limit: float) -> str:
    """The CNI error message the server sends for a worker that timed out or crashed."""
    if outcome == "timeout":
        return f"cnichain agent: {req.plugin_type} {req.command} did not finish within {limit:g}s"
    return f"cnichain agent: {req.plugin_type} {req.command} worker failed ({how})"
