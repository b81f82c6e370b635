"""What tells the reconciler, within milliseconds, that a runtime wrote or removed a cache entry.

libcni writes ``<cacheDir>/results/<network>-<containerID>-<ifname>`` when a chain's ADD has
succeeded and removes it when its DEL is done.  A new entry is a new attachment whose expected
state is known from that moment (:mod:`.ownership`), so the loop runs a pass for it at once
instead of at the next sweep: a firewall reload that landed between the chain's ADD and the
cache write is repaired within the settle and confirmation delays.  A removed entry lets the
loop undo a repair that raced the pod's DEL without waiting for its watch tick.

inotify through ``ctypes`` (libc's ``inotify_init1`` and ``inotify_add_watch``), no new
dependency.  Each cache root is watched for its ``results`` directory appearing (libcni creates
it on the first write), and ``results`` for files closed after writing, renamed in, deleted or
renamed away.  Watches that cannot be added (no directory yet, no inotify) leave the sweep as
the backstop; :meth:`CacheWatch.refresh` retries at every sweep.
"""

from __future__ import annotations

import ctypes
import os
import struct
from typing import Optional

IN_CLOSE_WRITE = 0x00000008
IN_MOVED_FROM = 0x00000040
IN_MOVED_TO = 0x00000080
IN_CREATE = 0x00000100
IN_DELETE = 0x00000200
IN_DELETE_SELF = 0x00000400
IN_MOVE_SELF = 0x00000800
IN_Q_OVERFLOW = 0x00004000
IN_IGNORED = 0x00008000
IN_ONLYDIR = 0x01000000
IN_ISDIR = 0x40000000
IN_NONBLOCK = os.O_NONBLOCK
IN_CLOEXEC = os.O_CLOEXEC

RESULTS = "results"
ROOT_MASK = IN_CREATE | IN_MOVED_TO | IN_ONLYDIR
RESULTS_MASK = IN_CLOSE_WRITE | IN_MOVED_TO | IN_DELETE | IN_MOVED_FROM | IN_DELETE_SELF | IN_MOVE_SELF | IN_ONLYDIR
_HEADER = struct.Struct("iIII")  # struct inotify_event: wd, mask, cookie, len (then the name)


class Changes:
    """What one read of the watch reported."""

    def __init__(self) -> None:
        self.written: set[str] = set()  # entry paths written or renamed in
        self.removed: set[str] = set()  # entry paths deleted or renamed away
        self.rescan = False  # a directory appeared or vanished, or events were lost: look at everything

    def __bool__(self) -> bool:
        return bool(self.written or self.removed or self.rescan)


def parse(data: bytes, dirs: dict[int, str]) -> Changes:
    """The changes in a buffer of ``struct inotify_event`` records (``dirs``: wd -> watched dir)."""
    out = Changes()
    pos = 0
    while pos + _HEADER.size <= len(data):
        wd, mask, _cookie, length = _HEADER.unpack_from(data, pos)
        raw = data[pos + _HEADER.size : pos + _HEADER.size + length]
        pos += _HEADER.size + length
        name = os.fsdecode(raw.split(b"\0", 1)[0])
        if mask & IN_Q_OVERFLOW:
            out.rescan = True
            continue
        folder = dirs.get(wd)
        if folder is None:
            continue
        if mask & (IN_IGNORED | IN_DELETE_SELF | IN_MOVE_SELF):
            out.rescan = True
            continue
        if os.path.basename(folder) != RESULTS:  # a cache root: its results dir appeared
            if name == RESULTS:
                out.rescan = True
            continue
        if not name or mask & IN_ISDIR or ".tmp" in name or name.startswith("."):
            continue  # a half-written file libcni or a runner is about to rename: its rename counts
        path = os.path.join(folder, name)
        if mask & (IN_CLOSE_WRITE | IN_MOVED_TO):
            out.written.add(path)
        elif mask & (IN_DELETE | IN_MOVED_FROM):
            out.removed.add(path)
    return out


class CacheWatch:
    """One inotify instance over the result caches' roots and their ``results`` directories."""

    def __init__(self, roots: list[str]) -> None:
        self.roots = list(roots)
        self._libc = ctypes.CDLL(None, use_errno=True)
        fd = self._libc.inotify_init1(IN_NONBLOCK | IN_CLOEXEC)
        if fd < 0:
            err = ctypes.get_errno()
            raise OSError(err, os.strerror(err))
        self.fd: int = fd
        self.dirs: dict[int, str] = {}  # wd -> directory
        self.refresh()

    def fileno(self) -> int:
        return self.fd

    def _add(self, path: str, mask: int) -> Optional[int]:
        wd = self._libc.inotify_add_watch(self.fd, os.fsencode(path), mask)
        if wd < 0:
            return None  # not there (yet), or not a directory: the next refresh tries again
        self.dirs[wd] = path
        return wd

    def refresh(self) -> None:
        """Watch every root and ``results`` directory that exists now (adding a watch twice is
        harmless: the kernel returns the same descriptor)."""
        for root in self.roots:
            self._add(root, ROOT_MASK)
            self._add(os.path.join(root, RESULTS), RESULTS_MASK)

    @property
    def watching(self) -> list[str]:
        return sorted(set(self.dirs.values()))

    def read(self) -> Changes:
        chunks = []
        while True:
            try:
                data = os.read(self.fd, 65536)
            except (BlockingIOError, InterruptedError):
                break
            if not data:
                break
            chunks.append(data)
        out = parse(b"".join(chunks), self.dirs)
        if out.rescan:
            for wd, _path in list(self.dirs.items()):
                self._libc.inotify_rm_watch(self.fd, wd)
            self.dirs.clear()
            self.refresh()
        return out

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1
