"""The reconciler: repair what live attachments lost, collect attachments that died.

One pass over the result caches (:mod:`.attachments`) per trigger -- a deletion announced by the
kernel (:mod:`.netlink_events`), a recent repair being watched, or the periodic sweep.  The two
jobs are apart: :mod:`.repairs` puts back, with each plugin's own code, what a live attachment
lost; :mod:`.leaks` tears down cached attachments whose pod is gone, and :mod:`.uncached_leaks`
state that no cache entry names.  This module holds what they share (the cache reader, the
counters, the runtime's listing), the sweep that runs them in turn, host-local's pool gauges,
and the one view they publish.
"""

from __future__ import annotations

import os
import time
from typing import Callable, Optional

from cnichain.podstate.sandboxes import NoSandboxes
from cnichain.podstate.view import pools_of

from cnichain.agent.reconcile import netlink_events as ev
from cnichain.agent.reconcile import status
from cnichain.agent.reconcile.attachments import CacheReader
from cnichain.agent.reconcile.leaks import CachedLeaks
from cnichain.agent.reconcile.part import Shared
from cnichain.agent.reconcile.repairs import Repairs
from cnichain.agent.reconcile.settings import ReconcileConfig
from cnichain.agent.reconcile.uncached_leaks import UncachedCollector

POOLS_EVERY = 30.0  # seconds between readings of host-local's stores (every reservation file)


class Reconciler:
    def __init__(self, cfg: ReconcileConfig, log: Callable[[str], None], sandboxes: Optional[object] = None,
                 clock: Callable[[], float] = time.monotonic, wall: Callable[[], float] = time.time) -> None:
        self.cfg = cfg
        self.log = log
        self.sandboxes = sandboxes if sandboxes is not None else NoSandboxes()
        self.clock, self.wall = clock, wall
        self.counters = status.Counters()
        self.reader = CacheReader()
        shared = Shared(cfg, log, self.sandboxes, self.reader, self.counters, clock, wall)
        self.repairs = Repairs(shared)
        self.leaks = CachedLeaks(shared)
        self.uncached = UncachedCollector(cfg, self.sandboxes, self.counters, log, wall)  # a lost cache's leaks
        self.pools: list[dict] = []  # host-local range sets: network, range_set, capacity, reserved, free
        self.pools_due = float("-inf")
        self.runtime_listing = getattr(self.sandboxes, "description", "")
        self._load()

    @property
    def acting(self) -> bool:
        return self.cfg.mode == "on"

    # -- persistence ------------------------------------------------------------------------
    def _load(self) -> None:
        doc = status.read(self.cfg.status_file) if self.cfg.status_file else None
        if doc:
            self.repairs.load(doc)
            self.leaks.load(doc)

    def view(self) -> dict:
        attachments: dict[str, dict] = {}
        rep, lk = self.repairs, self.leaks
        for key, state in sorted(rep.health.items()):
            att, _, plugin = key.partition("|")
            row = attachments.setdefault(att, {"plugins": {}})
            row["plugins"][plugin] = {"state": state, "detail": rep.details.get(key, "")}
        for att, state in sorted(lk.leaks.items()):
            row = attachments.setdefault(att, {"plugins": {}})
            row["leak"] = state
            row["gone_since"] = lk.gone_since.get(att, 0.0)
        return {
            "pid": os.getpid(), "mode": self.cfg.mode, "grace": self.cfg.grace, "networks": self.cfg.networks,
            "cache_dirs": self.cfg.cache_dirs, "runtime_listing": self.runtime_listing,
            "sweep_interval": self.cfg.sweep_interval, "written": self.wall(),
            "counters": status.as_dict(self.counters), "attachments": attachments, "stale_cache": lk.stale,
            "owned": sorted(rep.owned), "gone_since": lk.gone_since,
            "backing_off": rep.backing_off(),
            "pools": self.pools, "uncached": self.uncached.view, "uncached_note": self.uncached.note,
        }

    def save(self) -> None:
        if self.cfg.status_file:
            try:
                status.write(self.cfg.status_file, self.view())
            except OSError as exc:
                self.log(f"reconcile: cannot write {self.cfg.status_file}: {exc}")

    # -- range exhaustion ---------------------------------------------------------------------
    def read_pools(self, force: bool = False) -> None:
        """Capacity and reservations of each host-local range set of the networks in the caches,
        from host-local's own store and config parser (what ``cnichain inspect`` reports): a
        full range fails the next ADD, not the node, so STATUS does not say it; a gauge does.
        It reads every reservation file, so at most every :data:`POOLS_EVERY` seconds."""
        now = self.clock()
        if not force and now < self.pools_due:
            return
        self.pools_due = now + POOLS_EVERY
        found, blind = self.reader.targets(self.cfg.cache_dirs, self.cfg.in_scope)
        self.pools = [p.to_dict() for p in pools_of([t.entry for t in found] + blind)]

    # -- the sweep ----------------------------------------------------------------------------
    def sweep(self) -> None:
        started = time.perf_counter()
        try:
            self.repairs.repair_pass(ev.ALL)
        except Exception as exc:  # noqa: BLE001 - a sweep never kills the reconciler
            self.log(f"reconcile: repair pass failed: {exc!r}")
        try:
            self.leaks.collect_pass()
        except Exception as exc:  # noqa: BLE001
            self.log(f"reconcile: collection pass failed: {exc!r}")
        try:
            self.uncached.pass_(self.acting)
        except Exception as exc:  # noqa: BLE001
            self.log(f"reconcile: collecting state with no cache entry failed: {exc!r}")
        try:
            self.read_pools()
        except Exception as exc:  # noqa: BLE001
            self.log(f"reconcile: reading host-local's stores failed: {exc!r}")
        self.counters.sweeps += 1
        self.counters.sweep_seconds = time.perf_counter() - started
        self.counters.last_sweep = self.wall()
        self.save()
