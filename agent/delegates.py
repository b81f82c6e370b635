"""IPAM delegates inside a worker: our own plugin, run warm, instead of an exec of its launcher.

bridge delegates to host-local by exec'ing ``ipam.type`` from CNI_PATH.  When that binary is one of
our launchers pointing at this very agent, an exec would start an interpreter only to come back
through the socket.  :class:`DelegateRunner` recognises that case and talks to the agent directly
(:func:`cnichain.common.shim.exchange`, what the launcher would have done), so the delegate runs in
a pooled, already-warm worker of its own: the same isolation as an exec -- own process, own state,
own limit -- with exec's observable results, and neither a fork of this worker (whose every page
would then be copied again) nor an interpreter start.  When the agent cannot take it (worker
limit, draining, gone) the delegate is forked from this worker instead.  In every other case (a
foreign binary, a launcher for another agent or none) it returns None and
:mod:`cnichain.common.invoke` execs as usual, so the semantics never depend on the shortcut.

STATUS is the exception to "a worker of its own": containerd 2.1 sends it to every plugin every
~5 s, and bridge's STATUS is little more than host-local's, which only reads its data directory.
A second round trip through the agent (connect, REQUEST/ACK/GO, a second worker entering the same
namespaces) was two thirds of a warm bridge STATUS.  So a delegated STATUS runs the delegate's
dispatch right here, in this worker -- already in the caller's namespaces with the request's
environment and umask, exactly what that other worker would have entered -- with its own captured
streams, and with the per-network log settings the delegate's config sets undone afterwards.  The
answer is the same bytes (the same dispatch on the same env and stdin, encoded as a worker encodes
a RESULT); only a plugin log line's pid differs (the bridge's, not a second process's).
"""

from __future__ import annotations

import gc
import os
import re
import sys
from typing import Any, Optional

from cnichain.agent import worker
from cnichain.agent.protocol import read_result
from cnichain.common import shim

_LAUNCHER_FORWARD = re.compile(r"^code = forward\('([a-z0-9][a-z0-9._\-]*)', '([^'\\]*)'\)$", re.M)


# Delegated commands run in this very worker rather than in one of its own: read-only, polled often.
IN_PROCESS_COMMANDS = frozenset({"STATUS"})

MAX_SHIM_SIZE = 2 << 20  # a static native shim is 35 kB (musl) to ~1 MB (glibc); never read more


def launcher_target(binary: str) -> Optional[tuple[str, str]]:
    """(plugin type, baked socket) when ``binary`` is a launcher or native shim our installer wrote."""
    try:
        with open(binary, "rb") as fh:
            data = fh.read(4096)
            if data.startswith(b"\x7fELF"):
                if os.fstat(fh.fileno()).st_size > MAX_SHIM_SIZE:
                    return None  # a foreign binary (a Go plugin is megabytes)
                data += fh.read(MAX_SHIM_SIZE)
    except OSError:
        return None
    if data.startswith(b"\x7fELF"):
        from cnichain.node.native_shim import read_config

        config = read_config(data)
        return (config.plugin_type, config.socket) if config is not None else None
    head = data.decode("utf-8", "replace")
    from cnichain.node.launchers import MARKER

    if MARKER not in head:
        return None
    found = _LAUNCHER_FORWARD.search(head)
    return (found.group(1), found.group(2)) if found else None


def _read_all(fd: int) -> bytes:
    chunks: list[bytes] = []
    while True:
        chunk = os.read(fd, 65536)
        if not chunk:
            return b"".join(chunks)
        chunks.append(chunk)


class DelegateRunner:
    """Runs IPAM delegates that would exec one of our launchers -- and so come back to this very
    agent -- without an exec: in a worker of the agent (as the launcher would), forked from this
    one when the agent cannot take it, or, for :data:`IN_PROCESS_COMMANDS`, in this worker."""

    def __init__(self, plugins: dict[str, Any], socket_path: str, limit: float) -> None:
        self.plugins = plugins
        self.socket_path = socket_path
        self.limit = limit

    def __call__(self, binary: str, env: dict, stdin: bytes) -> Optional[tuple[int, bytes, bytes]]:
        target = launcher_target(binary)
        if target is None or target[0] not in self.plugins:
            return None
        path = env.get(shim.ENV_SOCKET, target[1])
        if path.lower() in shim.DISABLED or path != self.socket_path:
            return None  # that exec would not reach this agent: keep the exec semantics exactly
        if env.get("CNI_COMMAND") in IN_PROCESS_COMMANDS:
            return self.in_process(target[0], env, stdin)
        answer, _ = shim.exchange(self.socket_path, target[0], env, lambda: stdin)
        if answer is not None:
            return answer
        return self._fork(target[0], env, stdin)

    def in_process(self, plugin_type: str, env: dict, stdin: bytes) -> tuple[int, bytes, bytes]:
        """Run the delegate's dispatch in this worker: what the agent's worker for it would answer,
        without the round trip.  The caller's captured streams and log settings are put back."""
        from cnichain.common import log as log_mod

        streams = sys.stdout, sys.stderr
        log_state = dict(vars(log_mod.log))
        try:
            _code, frame = worker.dispatch_captured(self.plugins[plugin_type], env, stdin)
        finally:
            sys.stdout, sys.stderr = streams
            vars(log_mod.log).update(log_state)
        answer = read_result(frame)
        assert answer is not None  # output_frame always builds a whole RESULT frame
        return answer

    def _fork(self, plugin_type: str, env: dict, stdin: bytes) -> tuple[int, bytes, bytes]:
        """Run the delegate in a child of this worker: when the agent cannot take it (at its worker
        limit, draining, or gone), the request still never waits for, nor depends on, the agent."""
        plugin = self.plugins[plugin_type]
        r, w = os.pipe()
        pid = os.fork()
        if pid == 0:
            gc.freeze()  # the worker's heap stays shared with it
            status = worker.EXIT_FAILED
            try:
                os.close(r)
                worker.arm_alarm(self.limit)
                worker.reset_process_state(env)
                _code, frame = worker.dispatch_captured(plugin, env, stdin)
                view = memoryview(frame)
                while view:
                    view = view[os.write(w, view):]
                status = worker.EXIT_OK
            finally:
                os._exit(status)
        os.close(w)
        try:
            data = _read_all(r)
        finally:
            os.close(r)
        _pid, status = os.waitpid(pid, 0)
        if os.WIFEXITED(status) and os.WEXITSTATUS(status) == worker.EXIT_OK:
            answer = read_result(data)
            if answer is not None:
                return answer
        # Like an exec'd plugin that died: no JSON, a non-zero status.
        how = f"signal: {os.WTERMSIG(status)}" if os.WIFSIGNALED(status) else f"exit status {os.WEXITSTATUS(status)}"
        return 1, b"", f"{plugin_type} worker failed ({how})".encode()
