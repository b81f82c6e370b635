"""The reconciler's decisions: repair what live attachments lost, collect attachments that died.

One pass over the result caches (:mod:`.attachments`) per trigger -- a deletion announced by the
kernel (:mod:`.netlink_events`), a recent repair being watched, or the periodic sweep.

**Repair** (for attachments whose network namespace exists): each plugin's own check; when state
is missing and it is ours, the plugin's own repair (:mod:`.repair`).  Ours means: this reconciler
has seen that plugin's state installed for this attachment, or -- from the moment the cache entry
exists, before anything was seen -- the agent served that plugin's ADD, or the executable the
runtime runs for that type is one of ours (:mod:`.ownership`).  That is what keeps us off state we
do not own: a conflist that names ``portmap`` while another implementation sits in the bin dir is
never "repaired" into a second set of rules.  Just before repairing, the cache entry must
still be there, unchanged, the namespace must still exist, and the runtime must not list the
sandbox as not ready (it is stopping the pod: its DEL runs now or next); for a while after, the
entry is watched, and if the runtime's DEL removes it meanwhile (a DEL runs the chain in reverse
and drops the cache last), what the repair put back is removed again.  Repeated removal backs off
(:mod:`.budget`).

**Leaks**: an attachment whose cached namespace is gone, that the runtime does not list
(:mod:`.sandboxes`; no answer counts as "not listed" only together with the other two), and that
has looked dead for the grace period, is torn down by DEL with its cached config, exactly as
``cnichain gc --apply`` does it (:mod:`cnichain.podstate.gc`), which also removes its cache
entry.  The agent does not send CNI GC: the valid list would be this node's cache, and a pod whose
ADD has not finished is not in it yet.  A cache entry that names no namespace is never a leak.
"""

from __future__ import annotations

import os
import time
from contextlib import ExitStack
from dataclasses import dataclass
from typing import Any, Callable, Optional

from cnichain.podstate import gc as gc_mod
from cnichain.podstate.cache import CacheEntry
from cnichain.podstate.view import pools_of, stale_reason
from cnichain.common.errors import CniError
from cnichain.common.skel import Request

from cnichain.agent.reconcile import netlink_events as ev
from cnichain.agent.reconcile import repair, status
from cnichain.agent.reconcile.attachments import CacheReader, Target
from cnichain.agent.reconcile.budget import Budget
from cnichain.agent.reconcile.ownership import Ownership
from cnichain.agent.reconcile.uncached_leaks import UncachedCollector
from cnichain.podstate.sandboxes import NoSandboxes
from cnichain.podstate.cri import SANDBOX_NOTREADY
from cnichain.agent.reconcile.settings import ReconcileConfig

CONFIRM_SECONDS = 0.5  # state must stay missing this long before a repair (a DEL in progress ends first)
WATCH_SECONDS = 15.0  # how long after a repair a vanished cache entry means "undo it"
DEL_TIMEOUT = 30.0  # per plugin exec of a collecting DEL: the loop repairs nothing meanwhile
POOLS_EVERY = 30.0  # seconds between readings of host-local's stores (every reservation file)
STALE_TMP_SECONDS = 3600.0  # a half-written cache file (a writer's crash) older than this is litter
STATES_FRESH = 0.5  # seconds one ListPodSandbox answer serves the repairs that follow it
OK, MISSING, NOT_OURS, BACKOFF, REPAIRED, FAILED = "ok", "missing", "not-ours", "backoff", "repaired", "failed"
STOPPING = "stopping"


@dataclass
class Watched:
    until: float
    target: Target
    repairer: repair.Repairer
    request: Request


def _ours(t: Target) -> bool:
    """Whether the attachment's conflist runs one of our plugin types (containerd's own
    ``cni-loopback`` network, say, does not: its leaks are not ours to collect)."""
    from cnichain.plugins.registry import MODULES

    return any(p.get("type") in MODULES for p in t.conflist.plugins)


class Reconciler:
    def __init__(self, cfg: ReconcileConfig, log: Callable[[str], None], sandboxes: Optional[object] = None,
                 clock: Callable[[], float] = time.monotonic, wall: Callable[[], float] = time.time) -> None:
        self.cfg = cfg
        self.log = log
        self.sandboxes = sandboxes if sandboxes is not None else NoSandboxes()
        self.clock, self.wall = clock, wall
        self.counters = status.Counters()
        self.reader = CacheReader()
        self.budget = Budget(cfg.max_repairs, cfg.repair_window)
        self.owned: set[str] = set()  # "<network>/<cid>/<ifname>|<plugin>" seen installed
        self.ownership = Ownership(cfg.plugin_dirs, clock)  # ours to protect before it was seen
        self.health: dict[str, str] = {}  # same key -> OK, MISSING, ...
        self.details: dict[str, str] = {}  # same key -> what its check said
        self.watch: dict[str, Watched] = {}
        self.gone_since: dict[str, float] = {}  # attachment key -> unix time first seen dead
        self.leaks: dict[str, str] = {}  # attachment key -> its state as a leak candidate
        self.retry_at: dict[str, float] = {}  # attachment key -> next teardown attempt (after a failure)
        self.stale: list[dict] = []
        self.pools: list[dict] = []  # host-local range sets: network, range_set, capacity, reserved, free
        self.pools_due = float("-inf")
        self.suspect: dict[str, float] = {}  # key -> when its state was first found missing
        self.retry_kinds: set[str] = set()  # kinds whose repair failed: the loop retries them soon
        self.runtime_listing = getattr(self.sandboxes, "description", "")
        self._states: Optional[tuple[float, Optional[dict[str, int]]]] = None  # (when, sandbox states)
        self.uncached = UncachedCollector(cfg, self.sandboxes, self.counters, log, wall)  # a lost cache's leaks
        self._load()

    @property
    def acting(self) -> bool:
        return self.cfg.mode == "on"

    # -- persistence ------------------------------------------------------------------------
    def _load(self) -> None:
        doc = status.read(self.cfg.status_file) if self.cfg.status_file else None
        if doc and isinstance(doc.get("owned"), list):
            self.owned = {str(k) for k in doc["owned"]}
        if doc and isinstance(doc.get("gone_since"), dict):
            self.gone_since = {str(k): float(v) for k, v in doc["gone_since"].items() if isinstance(v, (int, float))}

    def view(self) -> dict:
        attachments: dict[str, dict] = {}
        for key, state in sorted(self.health.items()):
            att, _, plugin = key.partition("|")
            row = attachments.setdefault(att, {"plugins": {}})
            row["plugins"][plugin] = {"state": state, "detail": self.details.get(key, "")}
        for att, state in sorted(self.leaks.items()):
            row = attachments.setdefault(att, {"plugins": {}})
            row["leak"] = state
            row["gone_since"] = self.gone_since.get(att, 0.0)
        return {
            "pid": os.getpid(), "mode": self.cfg.mode, "grace": self.cfg.grace, "networks": self.cfg.networks,
            "cache_dirs": self.cfg.cache_dirs, "runtime_listing": self.runtime_listing,
            "sweep_interval": self.cfg.sweep_interval, "written": self.wall(),
            "counters": status.as_dict(self.counters), "attachments": attachments, "stale_cache": self.stale,
            "owned": sorted(self.owned), "gone_since": self.gone_since,
            "backing_off": sorted(k for k in self.health if self.budget.blocked(k, self.clock())),
            "pools": self.pools, "uncached": self.uncached.view, "uncached_note": self.uncached.note,
        }

    def save(self) -> None:
        if self.cfg.status_file:
            try:
                status.write(self.cfg.status_file, self.view())
            except OSError as exc:
                self.log(f"reconcile: cannot write {self.cfg.status_file}: {exc}")

    # -- repair -----------------------------------------------------------------------------
    def repair_pass(self, kinds: frozenset[str] = ev.ALL) -> int:
        """Check (and repair) every live attachment's state of ``kinds``; the number repaired."""
        found, _blind = self.reader.targets(self.cfg.cache_dirs, self.cfg.in_scope)
        self._forget_vanished(found)
        done = 0
        with ExitStack() as stack:
            surveys: dict[str, Any] = {}
            for t in found:
                if t.entry.netns_alive is not True:
                    continue
                try:
                    pairs = repair.requests(t, self.cfg.plugin_dirs(), kinds)
                except Exception as exc:  # noqa: BLE001 - one bad entry never stops the pass
                    self.log(f"reconcile: {t.key}: cannot build its plugins' input: {exc}")
                    continue
                for rep, req in pairs:
                    if self._intact(stack, surveys, t, rep, req):
                        continue
                    done += self._one(t, rep, req)
        self._check_watch()
        return done

    def _intact(self, stack: ExitStack, surveys: dict[str, Any], t: Target, rep: repair.Repairer,
                req: Request) -> bool:
        """The survey's quick answer, for state already known to be ours and healthy; any doubt
        (a survey or question that fails) means: run the full check."""
        key = f"{t.key}|{rep.plugin_type}"
        if key not in self.owned or self.health.get(key) not in (OK, REPAIRED):
            return False
        try:
            if rep.plugin_type not in surveys:
                surveys[rep.plugin_type] = rep.face.survey(stack)
            if rep.face.intact(surveys[rep.plugin_type], req):
                self.health[key] = OK
                return True
        except Exception:  # noqa: BLE001 - doubt: the full check decides
            surveys.pop(rep.plugin_type, None)
        return False

    def _one(self, t: Target, rep: repair.Repairer, req: Request) -> int:
        key = f"{t.key}|{rep.plugin_type}"
        try:
            missing = rep.face.check(req)
        except Exception as exc:  # noqa: BLE001 - e.g. the pod's namespace vanished mid-check
            missing = f"check failed: {exc}"
        if missing is None:
            self.owned.add(key)
            self.suspect.pop(key, None)
            self._set(key, OK, "")
            return 0
        if key not in self.owned and not self.ownership.ours(t.key, rep.plugin_type):
            self._set(key, NOT_OURS, f"{missing} (never seen installed, and the {rep.plugin_type} executable "
                                     "is not ours: left alone)")
            return 0
        now = self.clock()
        if self.budget.blocked(key, now):
            self._set(key, BACKOFF, missing)
            return 0
        if not (t.still_cached() and os.path.exists(t.entry.netns)):
            return 0  # the runtime is deleting it: nothing to re-create
        # A runtime's DEL removes the chain's state plugin by plugin, then the cache entry: state
        # that has just gone is confirmed missing once more before anything is re-created.
        first = self.suspect.setdefault(key, now)
        if now - first < CONFIRM_SECONDS:
            self.retry_kinds |= rep.kinds
            return 0
        self.suspect.pop(key, None)
        if self._stopping(t):
            self._set(key, STOPPING, f"{missing} (the runtime lists its sandbox as not ready: it is being stopped)")
            return 0
        if not self.acting:
            if self.health.get(key) != MISSING:
                self.log(f"reconcile: would repair {rep.plugin_type} of {t.key}: {missing} (dry run)")
                self.counters.repaired(rep.plugin_type, "dry-run")
            self._set(key, MISSING, missing)
            return 0
        started = time.perf_counter()
        try:
            rep.face.repair(repair.as_command(req, "ADD"))
            after = rep.face.check(req)
        except Exception as exc:  # noqa: BLE001 - CniError, a kernel refusal: report, go on
            after = f"{type(exc).__name__}: {exc}"
            if not isinstance(exc, CniError):
                import traceback

                after += "\n" + traceback.format_exc(limit=6)
        ms = (time.perf_counter() - started) * 1000
        # Watched whatever the outcome: a repair that failed half-way (the runtime's DEL took the
        # veth meanwhile) may still have put something back.
        self.watch[key] = Watched(now + WATCH_SECONDS, t, rep, req)
        if after is None:
            self.counters.repaired(rep.plugin_type, "ok")
            self._set(key, REPAIRED, missing)
            self.log(f"reconcile: repaired {rep.plugin_type} of {t.key} in {ms:.0f} ms (was: {missing})")
        else:
            self.counters.repaired(rep.plugin_type, "failed")
            self._set(key, FAILED, after)
            self.retry_kinds |= rep.kinds
            self.log(f"reconcile: repair of {rep.plugin_type} of {t.key} failed: {after}")
        if self.budget.spend(key, now):
            self.counters.backoffs += 1
            self.health[key] = BACKOFF
            self.log(f"reconcile: {rep.plugin_type} state of {t.key} was removed {self.cfg.max_repairs} times in "
                     f"{self.cfg.repair_window:.0f} s: something else keeps removing it; backing off")
        return 1

    def _stopping(self, t: Target) -> bool:
        """Whether the runtime lists ``t``'s sandbox as not ready: the pod is being stopped (its
        DEL runs now or next), so what is missing is on its way out, not lost.  A runtime stops
        the sandbox's processes before it tears the network down, and on a loaded node that DEL
        can outlast the confirmation.  One listing serves every repair of a pass."""
        states = getattr(self.sandboxes, "states", None)
        if states is None:
            return False
        now = self.clock()
        if self._states is None or now - self._states[0] > STATES_FRESH:
            self._states = (now, states())
        listing = self._states[1]
        return listing is not None and listing.get(t.entry.container_id) == SANDBOX_NOTREADY

    def _set(self, key: str, state: str, detail: str) -> None:
        self.health[key] = state
        self.details[key] = detail

    def _check_watch(self) -> None:
        now = self.clock()
        for key, w in list(self.watch.items()):
            if os.path.exists(w.target.entry.path):
                if now >= w.until:
                    del self.watch[key]
                continue
            del self.watch[key]
            try:
                w.repairer.face.undo(repair.as_command(w.request, "DEL"))
                self.log(f"reconcile: {w.target.key} was deleted right after its {w.repairer.plugin_type} repair: "
                         "removed what the repair put back")
            except Exception as exc:  # noqa: BLE001
                self.log(f"reconcile: undoing the repair of {key} failed: {exc}")

    def _forget_vanished(self, found: list[Target]) -> None:
        """Drop what we know of attachments the runtime no longer caches (DEL done, or collected)."""
        alive = {t.key for t in found}
        for key in list(self.health):
            if key.partition("|")[0] not in alive and key not in self.watch:
                self.health.pop(key, None)
                self.details.pop(key, None)
                self.suspect.pop(key, None)
                self.budget.forget(key)
        self.owned = {k for k in self.owned if k.partition("|")[0] in alive}

    # -- leaks and the cache ------------------------------------------------------------------
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
            self.repair_pass(ev.ALL)
        except Exception as exc:  # noqa: BLE001 - a sweep never kills the reconciler
            self.log(f"reconcile: repair pass failed: {exc!r}")
        try:
            self.collect_pass()
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
