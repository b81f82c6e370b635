"""The attachments the reconciler looks after, read from the runtimes' result caches.

A libcni cache entry (``<cacheDir>/results/<network>-<containerID>-<ifname>``) holds what the
runtime sent at ADD: the conflist, CNI_ARGS and capability arguments, and the chain's final result.
From it each plugin's stdin is rebuilt exactly as libcni builds it (:meth:`Runtime.plugin_config`),
so a repair is the plugin's own code run on the plugin's own input.  Entries are parsed and
validated by :mod:`cnichain.podstate.cache` (IDs, ifnames) before anything is built from them.

The reconciler looks at the caches on every pass, but a runtime writes an entry once at ADD and
removes it at DEL: :class:`CacheReader` reads and parses only files whose (inode, mtime, size)
changed since it last saw them, so a pass over a few hundred pods costs a directory listing and a
``stat`` per file.  A rewrite in place changes mtime and size, a replace (write to a temporary
file and rename, as libcni does) changes the inode.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Callable, Optional

from cnichain.podstate.cache import CacheEntry, entry_paths, read_entry
from cnichain.podstate.runtime import Attachment, ConfigError, ConfList, Runtime


@dataclass
class Target:
    """One cached attachment whose conflist is known."""

    entry: CacheEntry
    conflist: ConfList
    stamp: "Stamp"  # of the cache file as read: a re-ADD rewrites it

    @property
    def key(self) -> str:
        e = self.entry
        return f"{e.network}/{e.container_id}/{e.ifname}"

    @property
    def cache_root(self) -> str:
        return os.path.dirname(os.path.dirname(self.entry.path))

    def attachment(self) -> Attachment:
        e = self.entry
        return Attachment(e.container_id, e.netns if e.netns_alive else "", e.ifname, list(e.cni_args),
                          dict(e.capability_args))

    def plugin_env(self, command: str, bin_dirs: list[str]) -> dict[str, str]:
        """The CNI_* environment libcni would exec the plugin with."""
        e = self.entry
        env = {"CNI_COMMAND": command, "CNI_CONTAINERID": e.container_id, "CNI_NETNS": e.netns,
               "CNI_IFNAME": e.ifname, "CNI_PATH": ":".join(bin_dirs)}
        if e.cni_args:
            env["CNI_ARGS"] = ";".join(f"{k}={v}" for k, v in e.cni_args)
        return env

    def plugin_conf(self, plugin: dict) -> dict:
        """One plugin's stdin: name, version, runtimeConfig from capabilities, the cached result."""
        return Runtime([], self.cache_root).plugin_config(self.conflist, plugin, self.attachment(),
                                                          self.entry.result or None)

    def still_cached(self) -> bool:
        """Whether the runtime still holds this attachment, unchanged (no DEL or re-ADD since)."""
        return stamp_of(self.entry.path) == self.stamp


Stamp = tuple[int, int, int]  # (inode, mtime_ns, size) of a cache file


def _stamp(st: os.stat_result) -> Stamp:
    return (st.st_ino, st.st_mtime_ns, st.st_size)


def stamp_of(path: str) -> Optional[Stamp]:
    try:
        return _stamp(os.stat(path))
    except OSError:
        return None


class CacheReader:
    """The result caches, each file read and parsed again only when its :data:`Stamp` changed."""

    def __init__(self) -> None:
        # path -> (stamp, the parsed entry (None: not an entry), its Target (None: no usable conflist))
        self.known: dict[str, tuple[Stamp, Optional[CacheEntry], Optional[Target]]] = {}
        self.reads = 0  # files read and parsed so far (what the cache saves shows here)

    def targets(self, cache_dirs: list[str], in_scope: Optional[Callable[[str], bool]] = None,
                ) -> tuple[list[Target], list[CacheEntry]]:
        """(attachments with a usable cached conflist, entries without one), networks in scope only."""
        usable: list[Target] = []
        blind: list[CacheEntry] = []
        seen: set[str] = set()
        for d in cache_dirs:
            for path in entry_paths(d):
                seen.add(path)
                got = self._get(path)
                if got is None:
                    continue
                entry, target = got
                if in_scope is not None and not in_scope(entry.network):
                    continue
                if target is not None:
                    usable.append(target)
                else:
                    blind.append(entry)
        for path in set(self.known) - seen:
            del self.known[path]  # deleted (DEL done, or collected): forgotten
        return usable, blind

    def _get(self, path: str) -> Optional[tuple[CacheEntry, Optional[Target]]]:
        stamp = stamp_of(path)
        if stamp is None:
            self.known.pop(path, None)
            return None  # deleted since it was listed
        known = self.known.get(path)
        if known is None or known[0] != stamp:
            entry, st = read_entry(path)
            self.reads += 1
            if st is None:
                self.known.pop(path, None)
                return None
            stamp = _stamp(st)  # of the bytes parsed
            known = (stamp, entry, _target(entry, stamp) if entry is not None else None)
            self.known[path] = known
        _stamp_, entry, target = known
        return None if entry is None else (entry, target)


def _target(e: CacheEntry, stamp: Stamp) -> Optional[Target]:
    conf = e.config
    if conf is None or conf.get("name") != e.network:
        return None
    try:
        return Target(e, ConfList.from_dict(conf, e.path), stamp)
    except ConfigError:
        return None

