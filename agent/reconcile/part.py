"""What the reconciler's parts (:mod:`.repairs`, :mod:`.leaks`) share: the settings, the log, the
runtime's sandbox listing, the one cache reader, the counters the view publishes and the clocks."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from cnichain.agent.reconcile import status
from cnichain.agent.reconcile.attachments import CacheReader
from cnichain.agent.reconcile.settings import ReconcileConfig


@dataclass(frozen=True)
class Shared:
    cfg: ReconcileConfig
    log: Callable[[str], None]
    sandboxes: object
    reader: CacheReader
    counters: status.Counters
    clock: Callable[[], float]  # monotonic: confirmations, watches, back-off
    wall: Callable[[], float]  # unix time: what the status file records


class Part:
    def __init__(self, shared: Shared) -> None:
        self.cfg, self.log, self.sandboxes = shared.cfg, shared.log, shared.sandboxes
        self.reader, self.counters = shared.reader, shared.counters
        self.clock, self.wall = shared.clock, shared.wall

    @property
    def acting(self) -> bool:
        return self.cfg.mode == "on"
