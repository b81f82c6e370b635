"""The node reconciler: keeps what our plugins installed for live pods true while nobody calls them.

Plugins run only when the runtime calls them, so nothing they do can notice that a firewall reload
took a pod's hostPorts, that someone deleted its qdiscs, or that the runtime forgot to DEL a pod
whose namespace is long gone.  The agent runs all the time; this package is what it does with that:

* ``settings``: the options (``--reconcile off|dry-run|on``, ``--grace``, ``--network``,
  ``--runtime-endpoint``, ``--sweep-interval``, ``--cache-dir``, ``--bin-dir``, ``--mount-ns``);
* ``netlink_events``: nftables and rtnetlink deletion notifications (the fast trigger);
* ``cache_events``: new and removed result-cache entries (inotify): a new attachment is protected
  from then on; ``ownership``: which state is ours before it has been seen installed (our own
  executables, or an ADD the agent served: :meth:`Process.served`);
* ``uncached_leaks``: state of containers no cache entry names and the runtime does not list;
* ``attachments``: live attachments and each plugin's input, from the runtimes' result caches
  (each file parsed again only when it changed);
* ``repair``: the plugins with a repair face (their ``state.py``, found through the registry) and
  each one's input; ``repairs``: the repair pass over live attachments, its confirmations and
  watches; ``leaks``: collecting cached attachments that died, and the cache's litter;
* ``backoff``: backing off from whoever keeps removing our state;
* which pod sandboxes the runtime lists (CRI) is :mod:`cnichain.podstate.sandboxes`, shared
  with ``cnichain inspect`` and ``cnichain gc``;
* ``engine``: the sweep and the published view over those parts, ``status``: that view;
* ``loop``: the reconciler process; :class:`Process` (here): how the agent starts and stops it.
"""

from __future__ import annotations

import dataclasses
import json
import os
import socket
import subprocess
import sys
from typing import Any, Callable, Optional

from cnichain.agent.reconcile import status
from cnichain.agent.reconcile.settings import ReconcileConfig, to_argv

HINT_STDIN_MAX = 60_000  # bytes of a served ADD's stdin sent along (its network name); longer: no hint


class Process:
    """The reconciler's process as the agent sees it: started after warm-up, stopped at exit."""

    def __init__(self, cfg: ReconcileConfig, log: Callable[[str], None]) -> None:
        self.cfg = cfg
        self.log = log
        self.proc: Optional[subprocess.Popen] = None
        self.hints: Optional[socket.socket] = None  # our end of the served-ADD datagrams

    def start(self) -> None:
        if self.cfg.mode == "off":
            return
        from cnichain.node.launchers import import_roots

        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_DGRAM)
        ours.setblocking(False)  # a full queue drops a hint, never blocks the agent's loop
        code = (f"import sys; sys.path[0:0] = {import_roots()!r}; "
                "from cnichain.agent.reconcile.loop import main; sys.exit(main())")
        cfg = dataclasses.replace(self.cfg, hints_fd=theirs.fileno())
        argv = [sys.executable, "-P", "-c", code, "--parent", str(os.getpid()), *to_argv(cfg)]
        try:
            self.proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, close_fds=True, pass_fds=(theirs.fileno(),))
        finally:
            theirs.close()
        self.hints = ours
        self.log(f"reconciler started (pid {self.proc.pid}, {self.cfg.mode})")

    def served(self, req: Any, code: int) -> None:
        """The agent answered a request: a successful ADD tells the reconciler that this
        attachment's state of that plugin is ours from now on (its cache entry follows)."""
        if self.hints is None or code != 0 or getattr(req, "command", "") != "ADD":
            return
        try:
            env = req.env
            if len(req.stdin) > HINT_STDIN_MAX:
                return
            msg = json.dumps({"type": req.plugin_type, "cid": env.get("CNI_CONTAINERID", ""),
                              "ifname": env.get("CNI_IFNAME", "")}).encode() + b"\n" + bytes(req.stdin)
            self.hints.send(msg)
        except Exception:  # noqa: BLE001 - full, gone, or odd: a hint never costs the agent's loop anything
            pass  # the plugin's executable still decides what is ours

    @property
    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def metric_lines(self) -> list[str]:
        if self.cfg.mode == "off":
            return []
        return status.metric_lines(status.read(self.cfg.status_file), self.running)

    def stop(self, timeout: float = 10.0) -> None:
        proc, self.proc = self.proc, None
        if self.hints is not None:
            self.hints.close()
            self.hints = None
        if proc is None or proc.poll() is not None:
            return
        proc.terminate()
        try:
            proc.wait(timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(5)
