"""What tuning changes, decided without touching anything: pure functions of config and state.

The handlers read the current values (sysctls, link attributes), ask this module what differs
and what to save in the backup, and hand the answer to :mod:`.kernel`.
"""

from __future__ import annotations

TYPE_CHECKING = False
if TYPE_CHECKING:  # annotations only (typing costs milliseconds per exec)
    from typing import Any

    from .config import Sysctl, TuningConfig


def same(a: str, b: str) -> bool:
    """Sysctl values compare by their fields: ``0 2147483647`` reads back tab-separated."""
    return a.split() == b.split()


def wanted_link(cfg: TuningConfig) -> dict[str, Any]:
    """The configured link attributes, keyed like the backup file."""
    out: dict[str, Any] = {}
    if cfg.mac:
        out["mac"] = cfg.mac
    if cfg.promisc:
        out["promisc"] = True
    if cfg.mtu:
        out["mtu"] = cfg.mtu
    if cfg.allmulti is not None:
        out["allmulti"] = cfg.allmulti
    if cfg.txqlen is not None:
        out["txQLen"] = cfg.txqlen
    return out


def link_snapshot(state: Any, wanted: dict[str, Any]) -> dict[str, Any]:
    """The current values of exactly the attributes ``wanted`` changes (the backup's content)."""
    current = {
        "mac": state.mac,
        "promisc": state.promisc,
        "mtu": state.mtu,
        "allmulti": state.allmulti,
        "txQLen": state.txqlen,
    }
    return {k: current[k] for k in wanted}


def changed_sysctls(olds: list[tuple[Sysctl, str]]) -> dict[str, dict[str, str]]:
    """``{relative path: {"old": ..., "new": ...}}`` for the sysctls whose value must change."""
    return {s.rel: {"old": old, "new": s.value} for s, old in olds if not same(old, s.value)}
