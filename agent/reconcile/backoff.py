"""How often one thing may be repaired before the reconciler stops fighting whoever removes it.

Something that removes our rules again and again (a firewall manager that owns the whole
ruleset, an operator's script) would otherwise meet a repair after each of its runs.  After
``limit`` repairs of one (attachment, plugin) within ``window`` seconds the reconciler backs off
for a window that doubles each time (up to an hour) and reports it; a quiet window resets it.
"""

from __future__ import annotations

from dataclasses import dataclass, field

MAX_BACKOFF = 3600.0


@dataclass
class Backoff:
    limit: int
    window: float
    times: dict[str, list[float]] = field(default_factory=dict)
    until: dict[str, float] = field(default_factory=dict)  # key -> backing off until then
    strikes: dict[str, int] = field(default_factory=dict)
    last: dict[str, float] = field(default_factory=dict)  # key -> time of its latest repair

    def blocked(self, key: str, now: float) -> bool:
        return self.until.get(key, 0.0) > now

    def spend(self, key: str, now: float) -> bool:
        """Record one repair of ``key``; True when that reached the limit (now backing off)."""
        busy = max(self.last.get(key, float("-inf")), self.until.get(key, float("-inf")))
        if now - busy >= self.window:
            self.strikes.pop(key, None)  # a quiet window after the last repair or back-off: forgiven
        self.last[key] = now
        recent = [t for t in self.times.get(key, []) if now - t < self.window] + [now]
        self.times[key] = recent
        if len(recent) < self.limit:
            return False
        strikes = self.strikes.get(key, 0) + 1
        self.strikes[key] = strikes
        self.until[key] = now + min(self.window * (2 ** (strikes - 1)), MAX_BACKOFF)
        self.times[key] = []
        return True

    def forget(self, key: str) -> None:
        for table in (self.times, self.until, self.strikes, self.last):
            table.pop(key, None)
