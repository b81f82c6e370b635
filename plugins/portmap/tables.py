"""The only module of portmap that talks to nftables (through libnftables, one handle per process).

Fast paths are lock-free, single transactions guarded by the kernel itself: ``create`` fails with
EEXIST when a key is already claimed, and deleting a container's chain fails with EBUSY while a
shared-key chain still jumps to it.  Either way nothing is applied and the slow path runs: under a
lock held on the network namespace itself (so it serialises exactly the plugins working on this
namespace, and needs no file on disk), it lists our table once and rebuilds the keys involved.
"""

from __future__ import annotations

import errno
import fcntl
import os
import time

from cnichain.common import nft
from cnichain.common.errors import CniError, plugin_error
from cnichain.common.kernel_errors import NftError
from cnichain.common.log import log

from . import layout
from .layout import Snapshot

TYPE_CHECKING = False
if TYPE_CHECKING:  # annotations only
    from typing import Optional

    from .layout import OwnerPlan

ATTEMPTS = 6
# libnftables refusals that a rebuild under the lock can get past: a key or chain someone else
# just created (EEXIST) or deleted (ENOENT), or a chain still jumped to (EBUSY).
_RETRYABLE = (errno.EEXIST, errno.ENOENT, errno.EBUSY)


def _retryable(exc: NftError) -> bool:
    return exc.errno in _RETRYABLE


def _run(script: str) -> None:
    rc, _out, err = nft.handle().cmd(script)
    if rc != 0:
        raise NftError("nft", str(err).strip())


def _list(what: str) -> Optional[list[dict]]:
    try:
        return nft.list_ruleset(f"list {what}")
    except CniError as exc:  # NftError, or the binding missing
        raise plugin_error(f"could not list rules in table {layout.TABLE}: {exc}") from None


class _netns_lock:
    """An exclusive flock on this thread's network namespace inode (released on close).

    A small class, not a ``contextlib`` generator: see :mod:`cnichain.common.netns`.
    """

    __slots__ = ("fd",)

    def __enter__(self) -> None:
        fd = os.open("/proc/thread-self/ns/net", os.O_RDONLY | os.O_CLOEXEC)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
        except BaseException:
            os.close(fd)
            raise
        self.fd = fd

    def __exit__(self, *exc_info: object) -> bool:
        os.close(self.fd)
        return False


def snapshot() -> Optional[Snapshot]:
    objs = _list(f"table {layout.T}")
    return None if objs is None else Snapshot.from_json(objs)


def owner_comments(owner: str) -> Optional[list[str]]:
    """Rule comments of the container's DNAT chain, or None when it has none."""
    objs = _list(f"chain {layout.T} {layout.dnat_chain(owner)}")
    if objs is None:
        return None
    return [str(o["rule"].get("comment", "")) for o in objs if "rule" in o]


def chain_rule_count(name: str) -> Optional[int]:
    objs = _list(f"chain {layout.T} {name}")
    return None if objs is None else sum(1 for o in objs if "rule" in o)


def _slow(build) -> None:  # build(snapshot) -> script or "" for nothing to do
    last = ""
    with _netns_lock():
        for attempt in range(ATTEMPTS):
            snap = snapshot() or Snapshot()
            script = build(snap)
            if not script.strip():
                return
            try:
                _run(script)
                return
            except NftError as exc:
                last = exc.text
                if not _retryable(exc):
                    break
                time.sleep(0.005 * (attempt + 1))
    raise plugin_error(f"unable to set up nftables rules for port mappings: {last}")


def install(plan: OwnerPlan) -> None:
    """ADD: one transaction; the slow path when this container or one of its keys exists."""
    try:
        _run(layout.fast_add(plan))
        return
    except NftError as exc:
        log.debug(f"portmap: fast ADD for {plan.owner} refused ({exc.text.splitlines()[0]}); rebuilding")
    _slow(lambda snap: layout.rebuild(snap, add=plan))


def remove(owner: str, plan: Optional[OwnerPlan] = None) -> None:
    """DEL: with the ``plan`` the config describes, one self-checking transaction and no listing
    (see :mod:`.layout`); otherwise, or when the kernel holds something else for this container,
    list its chain (small), delete it and its keys in one transaction."""
    if plan is not None:
        try:
            _run(layout.config_delete(plan))
            return
        except NftError as exc:
            log.debug(f"portmap: DEL from config for {owner} refused ({exc.text.splitlines()[0]}); listing")
    comments = owner_comments(owner)
    if comments is None:
        return  # never added, or already deleted
    try:
        _run(layout.fast_delete(owner, comments))
        return
    except NftError as exc:
        log.debug(f"portmap: fast DEL for {owner} refused ({exc.text.splitlines()[0]}); rebuilding")
    _slow(lambda snap: layout.rebuild(snap, remove=[owner]))


def remove_many(select) -> None:
    """GC: remove every owner ``select(snapshot)`` returns, in one transaction."""
    _slow(lambda snap: layout.rebuild(snap, remove=select(snap)) if select(snap) else "")
