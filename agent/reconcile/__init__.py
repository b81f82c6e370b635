"""The node reconciler: keeps what our plugins installed for live pods true while nobody calls them.

Plugins run only when the runtime calls them, so nothing they do can notice that a firewall reload
took a pod's hostPorts, that someone deleted its qdiscs, or that the runtime forgot to DEL a pod
whose namespace is long gone.  The agent runs all the time; this package is what it does with that:

* ``settings``: the options (``--reconcile off|dry-run|on``, ``--grace``, ``--network``,
  ``--runtime-endpoint``, ``--sweep-interval``, ``--cache-dir``, ``--bin-dir``, ``--mount-ns``);
* ``netlink_events``: nftables and rtnetlink deletion notifications (the fast trigger);
* ``attachments``: live attachments and each plugin's input, from the runtimes' result caches
  (each file parsed again only when it changed);
* ``repair``: per plugin, its own check and its own repair (portmap, bandwidth, bridge's ipMasq and
  macspoofchk rules);
* ``budget``: backing off from whoever keeps removing our state;
* which pod sandboxes the runtime lists (CRI) is :mod:`cnichain.tools.podstate.sandboxes`, shared
  with ``cnichain inspect`` and ``cnichain gc``;
* ``engine``: the decisions (repair, leaks, cache hygiene), ``status``: the view it publishes;
* ``loop``: the reconciler process; :class:`Process` (here): how the agent starts and stops it.
"""

from __future__ import annotations

import os
import subprocess
import sys
from typing import Callable, Optional

from cnichain.agent.reconcile import status
from cnichain.agent.reconcile.settings import ReconcileConfig, to_argv


class Process:
    """The reconciler's process as the agent sees it: started after warm-up, stopped at exit."""

    def __init__(self, cfg: ReconcileConfig, log: Callable[[str], None]) -> None:
        self.cfg = cfg
        self.log = log
        self.proc: Optional[subprocess.Popen] = None

    def start(self) -> None:
        if self.cfg.mode == "off":
            return
        from cnichain.node.install import import_roots

        code = (f"import sys; sys.path[0:0] = {import_roots()!r}; "
                "from cnichain.agent.reconcile.loop import main; sys.exit(main())")
        argv = [sys.executable, "-P", "-c", code, "--parent", str(os.getpid()), *to_argv(self.cfg)]
        self.proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, close_fds=True)
        self.log(f"reconciler started (pid {self.proc.pid}, {self.cfg.mode})")

    @property
    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def metric_lines(self) -> list[str]:
        if self.cfg.mode == "off":
            return []
        return status.metric_lines(status.read(self.cfg.status_file), self.running)

    def stop(self, timeout: float = 10.0) -> None:
        proc, self.proc = self.proc, None
        if proc is None or proc.poll() is not None:
            return
        proc.terminate()
        try:
            proc.wait(timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(5)
