"""The face a plugin that keeps node state shows the reconciler and the node tools.

A plugin whose ADD leaves something on the node beyond the pod's own interface (nftables rules,
qdiscs and IFBs, reservation files) has a ``state.py`` in its package whose ``STATE`` says, in
the plugin's own terms, what it installed for one attachment and what to do about it:

* :class:`Repair`, for an attachment the runtime still caches: from the cached config and result
  (a parsed CHECK request), does it ask for kernel state at all, is that state there (a full
  check, and a quick question against one survey of the node per pass), put it back, take back
  what a repair put back when the attachment was deleted meanwhile;
* :class:`Leftovers`, for state of a container that no cache entry names any more: how to say
  what one owner holds, and how to remove exactly that owner's state without a cache.

The reconciler and the pod-state tools find these through ``plugins/registry.py`` (the types
with ``state``), so a change of what a plugin installs stays inside that plugin's folder.  This
module is plain types and constants, so a plugin's ``state.py`` stands on ``common`` alone.
"""

from __future__ import annotations

from contextlib import ExitStack
from dataclasses import dataclass
from typing import Any, Callable, Optional

TYPE_CHECKING = False
if TYPE_CHECKING:
    from cnichain.common.skel import Request

# Kinds of kernel change a repair answers for: a deletion of that kind makes its check run.
NFT = "nftables"
TC = "tc"
KINDS = frozenset({NFT, TC})


@dataclass(frozen=True)
class Repair:
    """What a plugin installed for a cached attachment, read back and put back by its own code."""

    kinds: frozenset[str]
    applies: Callable[[Request], bool]  # does this attachment's config ask for kernel state?
    check: Callable[[Request], Optional[str]]  # None: all there; else what is missing
    repair: Callable[[Request], None]
    undo: Callable[[Request], None]  # remove what a repair put back (the attachment was deleted meanwhile)
    survey: Callable[[ExitStack], Any]  # one read of this plugin's kernel state, for a whole pass
    intact: Callable[[Any, Request], bool]  # per attachment, against the survey: True = nothing to check


@dataclass(frozen=True)
class Leftovers:
    """State of one owner (network, container) that no cache entry names, removed without a cache.

    The items are what the node view attributed to that owner for this plugin (its own records:
    reservations, mappings, IFB names, rule sets); ``describe`` gives one report word group per
    item, ``collect`` removes them and returns report lines (it raises when the plugin refuses)."""

    describe: Callable[[list[Any]], list[str]]
    collect: Callable[[str, str, list[Any]], list[str]]  # (network, container_id, items) -> lines


@dataclass(frozen=True)
class PluginState:
    plugin_type: str
    repair: Optional[Repair] = None
    leftovers: Optional[Leftovers] = None


def checked(handler: Callable[[Request], Any]) -> Callable[[Request], Optional[str]]:
    """A plugin's CHECK handler as a repair check: None when it passes, else its error text."""
    from cnichain.common.errors import CniError

    def check(req: Request) -> Optional[str]:
        try:
            handler(req)
        except CniError as exc:
            return str(exc)
        return None

    return check
