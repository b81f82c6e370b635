"""IPAM delegates inside a worker: our own plugin, run in place, instead of an exec of its launcher.

bridge delegates to host-local by exec'ing ``ipam.type`` from CNI_PATH.  When that binary is one of
our launchers pointing at this very agent, an exec would start the shim only to come back through
the socket to a second worker.  :class:`DelegateRunner` recognises that case and runs the
delegate's dispatch right here, in the delegating worker -- already in the caller's namespaces
with the request's umask, under the request's alarm -- on the delegate's own environment and
stdin, with its own captured streams, and with the per-network log settings the delegate's config
sets undone afterwards.  The answer is the same bytes and exit code an exec would give (the same
dispatch on the same env and stdin, encoded as a worker encodes a RESULT); only a plugin log
line's pid differs (the bridge's, not a second process's).  Whatever the delegate leaves behind
(a descriptor, a thread, a changed environment) the worker's home check finds after the request,
and the worker is replaced, as for anything the delegating plugin leaves.

A worker of its own per delegate (the earlier design) cost the node more than the delegate's work:
in a storm every worker of the budget is busy, so each delegated ADD and DEL forked a fresh worker
from the agent (its page tables copied, then ~450 copy-on-write faults in the child) that retired
after the one request -- 3.3-3.6 ms of worker CPU for 1.0 ms of host-local work, plus the fork and
a second hand-over in the agent's loop, per command.  STATUS ran in place already (containerd 2.1
polls it every ~5 s).  In every other case (a foreign binary, a launcher for another agent or
none, ``--exec-delegates``) the runner returns None and :mod:`cnichain.common.invoke` execs as
usual, so the semantics never depend on the shortcut.
"""

from __future__ import annotations

import os
import re
import sys
from typing import Any, Optional

from cnichain.agent import worker
from cnichain.agent.protocol import read_result
from cnichain.common import shim

_LAUNCHER_FORWARD = re.compile(r"^code = forward\('([a-z0-9][a-z0-9._\-]*)', '([^'\\]*)'\)$", re.M)


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


class DelegateRunner:
    """Runs IPAM delegates that would exec one of our launchers -- and so come back to this very
    agent -- in this worker, without an exec (module docstring)."""

    def __init__(self, plugins: dict[str, Any], socket_path: str) -> None:
        self.plugins = plugins
        self.socket_path = socket_path

    def __call__(self, binary: str, env: dict, stdin: bytes) -> Optional[tuple[int, bytes, bytes]]:
        target = launcher_target(binary)
        if target is None or target[0] not in self.plugins:
            return None
        path = env.get(shim.ENV_SOCKET, target[1])
        if path.lower() in shim.DISABLED or path != self.socket_path:
            return None  # that exec would not reach this agent: keep the exec semantics exactly
        return self.in_process(target[0], env, stdin)

    def in_process(self, plugin_type: str, env: dict, stdin: bytes) -> tuple[int, bytes, bytes]:
        """Run the delegate's dispatch in this worker: what the agent's worker for it would answer.
        The caller's captured streams and log settings are put back."""
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
