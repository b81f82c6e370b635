"""The reconciler's repair: put back what live attachments lost, with each plugin's own code.

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
(:mod:`.backoff`).
"""

from __future__ import annotations

import os
import time
from contextlib import ExitStack
from dataclasses import dataclass
from typing import Any, Optional

from cnichain.common.errors import CniError
from cnichain.common.skel import Request
from cnichain.podstate.cri import SANDBOX_NOTREADY

from cnichain.agent.reconcile import netlink_events as ev
from cnichain.agent.reconcile import repair
from cnichain.agent.reconcile.attachments import Target
from cnichain.agent.reconcile.backoff import Backoff
from cnichain.agent.reconcile.ownership import Ownership
from cnichain.agent.reconcile.part import Part, Shared

CONFIRM_SECONDS = 0.5  # state must stay missing this long before a repair (a DEL in progress ends first)
WATCH_SECONDS = 15.0  # how long after a repair a vanished cache entry means "undo it"
STATES_FRESH = 0.5  # seconds one ListPodSandbox answer serves the repairs that follow it
OK, MISSING, NOT_OURS, BACKOFF, REPAIRED, FAILED = "ok", "missing", "not-ours", "backoff", "repaired", "failed"
STOPPING = "stopping"


@dataclass
class Watched:
    until: float
    target: Target
    repairer: repair.Repairer
    request: Request


class Repairs(Part):
    """Per (attachment, plugin): its health, whether it is ours, and the repairs being watched."""

    def __init__(self, shared: Shared) -> None:
        super().__init__(shared)
        self.backoff = Backoff(self.cfg.max_repairs, self.cfg.repair_window)
        self.owned: set[str] = set()  # "<network>/<cid>/<ifname>|<plugin>" seen installed
        self.ownership = Ownership(self.cfg.plugin_dirs, self.clock)  # ours to protect before it was seen
        self.health: dict[str, str] = {}  # same key -> OK, MISSING, ...
        self.details: dict[str, str] = {}  # same key -> what its check said
        self.watch: dict[str, Watched] = {}
        self.suspect: dict[str, float] = {}  # key -> when its state was first found missing
        self.retry_kinds: set[str] = set()  # kinds whose repair failed: the loop retries them soon
        self._states: Optional[tuple[float, Optional[dict[str, int]]]] = None  # (when, sandbox states)

    def load(self, doc: dict) -> None:
        if isinstance(doc.get("owned"), list):
            self.owned = {str(k) for k in doc["owned"]}

    def backing_off(self) -> list[str]:
        return sorted(k for k in self.health if self.backoff.blocked(k, self.clock()))

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
        self.check_watch()
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
        if self.backoff.blocked(key, now):
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
        if self.backoff.spend(key, now):
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

    def check_watch(self) -> None:
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
                self.backoff.forget(key)
        self.owned = {k for k in self.owned if k.partition("|")[0] in alive}
