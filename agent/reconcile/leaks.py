"""The reconciler's collection of cached attachments that died, and of the cache's litter.

**Leaks**: an attachment whose cached namespace is gone, that the runtime does not list
(:mod:`cnichain.podstate.sandboxes`; no answer counts as "not listed" only together with the other two), and that
has looked dead for the grace period, is torn down by DEL with its cached config, exactly as
``cnichain gc --apply`` does it (:mod:`cnichain.podstate.gc`), which also removes its cache
entry.  The agent does not send CNI GC: the valid list would be this node's cache, and a pod whose
ADD has not finished is not in it yet.  A cache entry that names no namespace is never a leak.
"""

from __future__ import annotations

import os
from typing import Optional

from cnichain.podstate import gc as gc_mod
from cnichain.podstate.cache import CacheEntry
from cnichain.podstate.view import stale_reason

from cnichain.agent.reconcile.attachments import Target
from cnichain.agent.reconcile.part import Part, Shared

DEL_TIMEOUT = 30.0  # per plugin exec of a collecting DEL: the loop repairs nothing meanwhile
STALE_TMP_SECONDS = 3600.0  # a half-written cache file (a writer's crash) older than this is litter


def _ours(t: Target) -> bool:
    """Whether the attachment's conflist runs one of our plugin types (containerd's own
    ``cni-loopback`` network, say, does not: its leaks are not ours to collect)."""
    from cnichain.plugins.registry import MODULES

    return any(p.get("type") in MODULES for p in t.conflist.plugins)


class CachedLeaks(Part):
    """Per cached attachment that looks dead: since when, what was decided, when to try again."""

    def __init__(self, shared: Shared) -> None:
        super().__init__(shared)
        self.gone_since: dict[str, float] = {}  # attachment key -> unix time first seen dead
        self.leaks: dict[str, str] = {}  # attachment key -> its state as a leak candidate
        self.retry_at: dict[str, float] = {}  # attachment key -> next teardown attempt (after a failure)
        self.stale: list[dict] = []

    def load(self, doc: dict) -> None:
        if isinstance(doc.get("gone_since"), dict):
            self.gone_since = {str(k): float(v) for k, v in doc["gone_since"].items() if isinstance(v, (int, float))}

    def collect_pass(self) -> None:
        found, blind = self.reader.targets(self.cfg.cache_dirs, self.cfg.in_scope)
        entries: list[tuple[CacheEntry, Optional[Target]]] = [(t.entry, t) for t in found]
        entries += [(e, None) for e in blind]
        listed = self.sandboxes.listed() if hasattr(self.sandboxes, "listed") else None
        now = self.wall()
        due: list[tuple[CacheEntry, Optional[Target]]] = []
        self.stale = []
        seen = set()
        for e, t in entries:
            key = f"{e.network}/{e.container_id}/{e.ifname}"
            seen.add(key)
            reason = stale_reason(e, listed)  # what `cnichain inspect` calls a stale cache entry
            if not reason:
                self.gone_since.pop(key, None)
                self.leaks.pop(key, None)
                if e.netns_alive is False:
                    self.leaks[key] = "netns gone, but the runtime still lists the sandbox: kept"
                continue
            if key not in self.gone_since:
                self.gone_since[key] = now
                self.counters.leaks_found += 1
                self.log(f"reconcile: {key}: network namespace {e.netns} is gone; collected after "
                         f"{self.cfg.grace:.0f} s unless it comes back or the runtime lists it")
            age = now - self.gone_since[key]
            why = reason if t is not None else f"{reason}; no conflist cached, so only its file can go"
            self.stale.append({"attachment": key, "cache_file": e.path, "dead_for": round(age, 1), "why": why})
            if age < self.cfg.grace:
                self.leaks[key] = f"netns gone for {age:.0f} s (grace {self.cfg.grace:.0f} s)"
                continue
            if self.retry_at.get(key, 0.0) > now:
                continue
            if t is not None and not _ours(t):
                self.leaks[key] = "netns gone; its network runs none of our plugins: left to its runtime"
                continue
            due.append((e, t))
            self.leaks[key] = "due for collection"
        for key in list(self.gone_since):
            if key not in seen:
                self.gone_since.pop(key, None)
                self.leaks.pop(key, None)
                self.retry_at.pop(key, None)
        for e, t in due:
            self._collect(e, t, [x for x, _ in entries])
        self._prune_tmp()

    def _collect(self, e: CacheEntry, t: Optional[Target], entries: list[CacheEntry]) -> None:
        key = f"{e.network}/{e.container_id}/{e.ifname}"
        if not self.acting:
            self.log(f"reconcile: would collect {key} (dry run)")
            self.retry_at[key] = self.wall() + max(self.cfg.grace, 300.0)  # say it again later, not every sweep
            return
        # The plan `cnichain gc --apply` runs, with every other attachment of the network valid:
        # a DEL with the cached conflist, or (none cached) removing the stale cache file.
        same_net = [x for x in entries if x.network == e.network]
        valid = [(x.container_id, x.ifname) for x in same_net if x.path != e.path]
        plan = gc_mod.build(same_net, t.conflist.raw if t is not None else None, valid, None)
        plan.deletions = [d for d in plan.deletions if d.entry.path == e.path]
        plan.collections = []
        from cnichain.podstate.runtime import Runtime

        root = os.path.dirname(os.path.dirname(e.path))
        lines, ok = gc_mod.execute(plan, lambda _e: Runtime(self.cfg.plugin_dirs(), root, timeout=DEL_TIMEOUT))
        if ok and plan.deletions:
            if t is None:
                self.counters.cache_pruned += 1
            else:
                self.counters.leaks_collected += 1
            self.leaks.pop(key, None)
            self.log(f"reconcile: collected leaked {key}: {'; '.join(lines)}")
        else:
            self.counters.leak_failures += 1
            self.retry_at[key] = self.wall() + max(self.cfg.sweep_interval * 6, 60.0)
            self.leaks[key] = f"teardown failed: {'; '.join(lines)}"
            self.log(f"reconcile: collecting {key} failed (retried later): {'; '.join(lines)}")

    def _prune_tmp(self) -> None:
        """Half-written cache files (``*.tmp*``) a crashed writer left, once clearly abandoned."""
        now = self.wall()
        for d in self.cfg.cache_dirs:
            folder = os.path.join(d, "results")
            try:
                names = os.listdir(folder)
            except OSError:
                continue
            for name in names:
                if ".tmp" not in name:
                    continue
                path = os.path.join(folder, name)
                try:
                    st = os.lstat(path)
                    if now - st.st_mtime < STALE_TMP_SECONDS or not os.path.isfile(path) or os.path.islink(path):
                        continue
                    if self.acting:
                        os.unlink(path)
                        self.counters.cache_pruned += 1
                    self.log(f"reconcile: {'removed' if self.acting else 'would remove'} abandoned cache file {path}")
                except OSError:
                    continue
