"""The reconciler's part in collecting leaks that no result-cache entry names (a lost cache).

The finding and the removal are :mod:`cnichain.podstate.uncached`'s (shared with ``cnichain
gc``); here is when to act.  Only with a runtime listing (CRI ``ListPodSandbox``): a container it
does not list, that no cache entry names, whose state has stayed so for the grace period, is
collected after a *fresh* listing still lacks it and no cache entry has appeared for it meanwhile.
A listing that fails or is cut short means "cannot tell": nothing is collected, and the grace
period of every candidate starts again once the runtime answers.  Each collection is logged and
counted (``uncached_found``, ``uncached_collected``, ``uncached_failures``).
"""

from __future__ import annotations

import os
from typing import Callable, Optional

from cnichain.podstate import uncached
from cnichain.podstate.cache import entry_paths

from cnichain.agent.reconcile.settings import ReconcileConfig
from cnichain.agent.reconcile.status import Counters

RETRY_AFTER = 60.0  # seconds before a failed collection is tried again
EVERY = 30.0  # at most this many seconds between looks (each reads every cache file and the kernel state)


class UncachedCollector:
    def __init__(self, cfg: ReconcileConfig, sandboxes: object, counters: Counters, log: Callable[[str], None],
                 wall: Callable[[], float]) -> None:
        self.cfg = cfg
        self.sandboxes = sandboxes
        self.counters = counters
        self.log = log
        self.wall = wall
        self.since: dict[str, float] = {}  # "<network>/<cid>" -> unix time first seen uncached
        self.retry_at: dict[str, float] = {}
        self.ipam_dirs: list[str] = []  # every host-local dataDir a cached conflist ever named
        self.view: list[dict] = []  # for the status file
        self.note = ""  # why nothing is looked at (no listing)
        self.due = float("-inf")  # wall time of the next look

    def _listed(self) -> Optional[set[str]]:
        listed = getattr(self.sandboxes, "listed", None)
        return listed() if listed is not None else None

    def _cached_now(self, cid: str) -> bool:
        """Whether any cache entry names ``cid`` right now (its file name holds it)."""
        return any(f"-{cid}-" in os.path.basename(p) for d in self.cfg.cache_dirs for p in entry_paths(d))

    def pass_(self, acting: bool) -> None:
        from cnichain.podstate import view as view_mod
        from cnichain.podstate.cache import read_cache

        now = self.wall()
        if now < self.due:
            return
        # Often enough that a candidate is acted on soon after its grace period, at most every EVERY s.
        self.due = now + min(EVERY, max(self.cfg.sweep_interval, self.cfg.grace / 2))
        listed = self._listed()
        if listed is None:  # no listing configured, or no answer: cannot tell
            self.since.clear()  # every grace period starts again once the runtime answers
            self.view = []
            self.note = "no answer from a runtime listing: state with no cache entry is not collected"
            return
        self.note = ""
        entries = [e for d in self.cfg.cache_dirs for e in read_cache(d)]
        found_ipam, _tuning = view_mod.discovered_dirs(entries)
        for d in [view_mod.HOST_LOCAL_DATA_DIR, *found_ipam]:
            if d not in self.ipam_dirs:
                self.ipam_dirs.append(d)
        src = view_mod.Sources(cache_dirs=self.cfg.cache_dirs, ipam_dirs=list(self.ipam_dirs), tuning_dirs=[],
                               listed=listed)
        node = view_mod.collect(src)
        leaks = [lk for lk in uncached.find(node, listed, {e.container_id for e in entries})
                 if self.cfg.in_scope(lk.network)]
        seen = set()
        due = []
        self.view = []
        for leak in leaks:
            seen.add(leak.key)
            if leak.key not in self.since:
                self.since[leak.key] = now
                self.counters.uncached_found += 1
                self.log(f"reconcile: {leak.key} holds {', '.join(leak.held())} with no cache entry and is not "
                         f"listed by the runtime; collected after {self.cfg.grace:.0f} s unless it appears")
            age = now - self.since[leak.key]
            self.view.append({"attachment": leak.key, "held": leak.held(), "uncached_for": round(age, 1)})
            if age >= self.cfg.grace and self.retry_at.get(leak.key, 0.0) <= now:
                due.append(leak)
        for key in list(self.since):
            if key not in seen:
                self.since.pop(key, None)
                self.retry_at.pop(key, None)
        if not due:
            return
        fresh = self._listed()  # right before acting: the runtime is the truth
        if fresh is None:
            return
        for leak in due:
            if leak.container_id in fresh or self._cached_now(leak.container_id):
                self.since.pop(leak.key, None)
                continue
            if not acting:
                self.log(f"reconcile: would collect {leak.key}: {', '.join(leak.held())} (dry run)")
                self.retry_at[leak.key] = now + max(self.cfg.grace, 300.0)
                continue
            lines, ok = uncached.collect(leak)
            if ok:
                self.counters.uncached_collected += 1
                self.since.pop(leak.key, None)
                self.log(f"reconcile: collected {leak.key} (no cache entry, not listed by the runtime): "
                         f"{'; '.join(lines)}")
            else:
                self.counters.uncached_failures += 1
                self.retry_at[leak.key] = now + RETRY_AFTER
                self.log(f"reconcile: collecting {leak.key} failed (retried later): {'; '.join(lines)}")
