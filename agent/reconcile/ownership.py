"""Which plugin state the reconciler may protect before it has seen that state installed.

A cache entry appears the moment the runtime's ADD is done, and a firewall reload can land
before the reconciler's first look at the kernel -- even between the chain's ADD and the cache
write.  Waiting to *see* the state installed would leave such a pod unprotected for good, so the
expected state is taken from the cached config and result (the view CHECK takes) as soon as the
entry exists, provided the state is ours to re-create:

* the agent served that plugin's ADD for the attachment itself (:meth:`Ownership.served`), or
* the executable the runtime runs for that plugin type -- the first file of that name in the
  plugin directories, as libcni looks it up -- is one of our own executables
  (:func:`cnichain.node.launchers.written_here`).

A conflist that names ``portmap`` while the bin dir holds another implementation is therefore
never "repaired" into a second set of rules; for those plugins the old rule stays: state this
reconciler has seen installed (and checked with our own CHECK) is protected, other state is left
alone.  The answer per executable is kept until the file's (inode, mtime, size) changes.
"""

from __future__ import annotations

import os
import time
from typing import Callable, Optional

from cnichain.agent.reconcile.attachments import Stamp, stamp_of

SERVED_TTL = 300.0  # seconds a served ADD vouches for an attachment whose cache entry has not appeared


class Ownership:
    def __init__(self, plugin_dirs: Callable[[], list[str]], clock: Callable[[], float] = time.monotonic) -> None:
        self.plugin_dirs = plugin_dirs
        self.clock = clock
        self._verdicts: dict[str, tuple[Optional[Stamp], bool]] = {}  # executable path -> (stamp, ours)
        self._served: dict[str, float] = {}  # "<network>/<cid>/<ifname>|<type>" -> until

    def executable(self, plugin_type: str) -> Optional[str]:
        """The file the runtime execs for ``plugin_type``: the first executable of that name."""
        if not plugin_type or "/" in plugin_type or plugin_type.startswith("."):
            return None
        for d in self.plugin_dirs():
            path = os.path.join(d, plugin_type)
            if os.path.isfile(path) and os.access(path, os.X_OK):
                return path
        return None

    def installed_by_us(self, plugin_type: str) -> bool:
        from cnichain.node.launchers import written_here

        path = self.executable(plugin_type)
        if path is None:
            return False
        stamp = stamp_of(path)
        known = self._verdicts.get(path)
        if known is None or known[0] != stamp:
            known = (stamp, written_here(path, plugin_type))
            self._verdicts[path] = known
        return known[1]

    def served(self, attachment: str, plugin_type: str) -> None:
        """The agent answered this attachment's ADD of ``plugin_type`` with success."""
        self._served[f"{attachment}|{plugin_type}"] = self.clock() + SERVED_TTL
        if len(self._served) > 4096:  # a bounded memory of hints
            now = self.clock()
            self._served = {k: v for k, v in self._served.items() if v > now}

    def ours(self, attachment: str, plugin_type: str) -> bool:
        """Whether state of ``plugin_type`` for ``attachment`` is ours to re-create unseen."""
        until = self._served.get(f"{attachment}|{plugin_type}")
        if until is not None and until > self.clock():
            return True
        return self.installed_by_us(plugin_type)
